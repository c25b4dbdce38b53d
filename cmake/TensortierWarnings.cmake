# Warning flags for every first-party C and C++ target. Generated code (protobuf, BPF skeletons)
# is compiled into its own targets without them.
add_library(tt_warnings INTERFACE)
target_compile_options(tt_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
  -Wnon-virtual-dtor -Wold-style-cast -Wcast-align -Wunused -Woverloaded-virtual
  -Wnull-dereference -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough)
if(TT_WERROR)
  target_compile_options(tt_warnings INTERFACE -Werror)
endif()
