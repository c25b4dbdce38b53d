# Every dependency comes from a Debian 12 package (see README "Set-up"); nothing is vendored.
find_package(PkgConfig REQUIRED)

pkg_check_modules(LIBNUMA REQUIRED IMPORTED_TARGET numa)          # libnuma-dev
pkg_check_modules(LIBBPF REQUIRED IMPORTED_TARGET libbpf>=1.0)    # libbpf-dev
pkg_check_modules(LIBSYSTEMD REQUIRED IMPORTED_TARGET libsystemd) # libsystemd-dev

# libpfm4-dev and libglpk-dev ship no pkg-config or CMake files.
find_path(PFM_INCLUDE_DIR perfmon/pfmlib_perf_event.h REQUIRED)
find_library(PFM_LIBRARY pfm REQUIRED)
add_library(tt::pfm UNKNOWN IMPORTED)
set_target_properties(tt::pfm PROPERTIES IMPORTED_LOCATION "${PFM_LIBRARY}"
                      INTERFACE_INCLUDE_DIRECTORIES "${PFM_INCLUDE_DIR}")

find_path(GLPK_INCLUDE_DIR glpk.h REQUIRED)
find_library(GLPK_LIBRARY glpk REQUIRED)
add_library(tt::glpk UNKNOWN IMPORTED)
set_target_properties(tt::glpk PROPERTIES IMPORTED_LOCATION "${GLPK_LIBRARY}"
                      INTERFACE_INCLUDE_DIRECTORIES "${GLPK_INCLUDE_DIR}")

find_package(Boost 1.74 REQUIRED)       # libboost-dev: Asio and Beast are header-only
find_package(Protobuf 3.21 REQUIRED)    # libprotobuf-dev, protobuf-compiler
find_package(GTest REQUIRED)            # libgtest-dev, libgmock-dev
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)  # nlohmann-json3-dev: JSON for --json output and the HTTP API
