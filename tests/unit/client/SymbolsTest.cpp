// libtensortier.so.1 exports the C ABI and the C++ API only, and pulls in no protobuf.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <link.h>

#include <string>

namespace {

struct Library {
  void* handle = dlopen(TT_LIBTENSORTIER, RTLD_NOW | RTLD_LOCAL);
  ~Library() {
    if (handle != nullptr) dlclose(handle);
  }
};

TEST(ClientSymbols, ExportsTheCAbiAndTheCppApi) {
  Library lib;
  ASSERT_NE(lib.handle, nullptr) << dlerror();
  for (const char* name : {"tensortier_client_create", "tensortier_register_region", "tensortier_step_begin",
                           "tensortier_query_placement", "tensortier_last_error",
                           "_ZN10tensortier6Client6createERKNS_13ClientOptionsE"})
    EXPECT_NE(dlsym(lib.handle, name), nullptr) << name;
}

TEST(ClientSymbols, HidesTtCoreAndTheWireCodec) {
  Library lib;
  ASSERT_NE(lib.handle, nullptr) << dlerror();
  // tt::log::setLevel, tt::logicError, tt::client::wire::encodeHello: linked in, never exported.
  for (const char* name : {"_ZN2tt3log8setLevelENS0_5LevelE",
                           "_ZN2tt10logicErrorENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
                           "_ZN2tt6client4wire11encodeHelloB5cxx11EmSt4spanIKjLm18446744073709551615EESt17basic_"
                           "string_viewIcSt11char_traitsIcEEb"})
    EXPECT_EQ(dlsym(lib.handle, name), nullptr) << name << " is exported";
}

TEST(ClientSymbols, DependsOnNoProtobuf) {
  Library lib;
  ASSERT_NE(lib.handle, nullptr) << dlerror();
  std::string loaded;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        *static_cast<std::string*>(out) += std::string(info->dlpi_name) + "\n";
        return 0;
      },
      &loaded);
  EXPECT_NE(loaded.find("libtensortier.so.1"), std::string::npos) << loaded;
  EXPECT_EQ(loaded.find("libprotobuf"), std::string::npos) << loaded;
}

}  // namespace
