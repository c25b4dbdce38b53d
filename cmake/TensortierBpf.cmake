# Compiles bpf/<name>.bpf.c into a CO-RE object and generates its libbpf skeleton.
#
# vmlinux.h: generated at build time with `bpftool btf dump` from the BTF of the build machine's
# running kernel (/sys/kernel/btf/vmlinux), or from the file named by -DTT_VMLINUX_BTF=... . It is a
# build output, never committed. CO-RE relocations make the objects load on other kernels (the VM's
# 6.1/6.12 kernels) as long as the fields they read exist there; programs only use stable fields.
find_program(BPF_CLANG clang REQUIRED)
find_program(BPFTOOL bpftool REQUIRED)
set(TT_VMLINUX_BTF "/sys/kernel/btf/vmlinux" CACHE FILEPATH "BTF blob used to generate vmlinux.h")
if(NOT EXISTS "${TT_VMLINUX_BTF}")
  message(FATAL_ERROR "No kernel BTF at ${TT_VMLINUX_BTF}: the kernel needs CONFIG_DEBUG_INFO_BTF=y, "
                      "or pass -DTT_VMLINUX_BTF=<path to a vmlinux with BTF>")
endif()

set(TT_BPF_GEN_DIR "${CMAKE_BINARY_DIR}/bpf-gen")
file(MAKE_DIRECTORY "${TT_BPF_GEN_DIR}")
add_custom_command(
  OUTPUT "${TT_BPF_GEN_DIR}/vmlinux.h"
  COMMAND "${BPFTOOL}" btf dump file "${TT_VMLINUX_BTF}" format c > "${TT_BPF_GEN_DIR}/vmlinux.h"
  DEPENDS "${TT_VMLINUX_BTF}"
  COMMENT "Generating vmlinux.h from ${TT_VMLINUX_BTF}"
  VERBATIM)
add_custom_target(tt_vmlinux_h DEPENDS "${TT_BPF_GEN_DIR}/vmlinux.h")

# tt_bpf_skeleton(<name>) -> INTERFACE target tt_bpf_<name> whose include path holds <name>.skel.h
# -mcpu=v3: BPF atomics (compare-and-swap, kernel 5.12+) for the chunk counters' merges; the
# programs need 6.1 anyway (perf_event programs with a non-preallocated hash).
# [INCLUDES dir...]: more header folders (a test program built on the daemon's bpf/ headers).
function(tt_bpf_skeleton name)
  cmake_parse_arguments(B "" "" "INCLUDES" ${ARGN})
  set(src "${CMAKE_CURRENT_SOURCE_DIR}/${name}.bpf.c")
  set(obj "${TT_BPF_GEN_DIR}/${name}.bpf.o")
  set(skel "${TT_BPF_GEN_DIR}/${name}.skel.h")
  file(GLOB headers CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/*.h")
  set(include_flags -I "${CMAKE_CURRENT_SOURCE_DIR}")
  foreach(dir IN LISTS B_INCLUDES)
    file(GLOB more CONFIGURE_DEPENDS "${dir}/*.h")
    list(APPEND headers ${more})
    list(APPEND include_flags -I "${dir}")
  endforeach()
  add_custom_command(
    OUTPUT "${obj}"
    COMMAND "${BPF_CLANG}" -g -O2 -target bpf -mcpu=v3 -D__TARGET_ARCH_x86 -Wall -Werror
            -I "${TT_BPF_GEN_DIR}" ${include_flags} -c "${src}" -o "${obj}"
    DEPENDS "${src}" ${headers} tt_vmlinux_h "${TT_BPF_GEN_DIR}/vmlinux.h"
    COMMENT "BPF CO-RE object ${name}.bpf.o"
    VERBATIM)
  add_custom_command(
    OUTPUT "${skel}"
    COMMAND "${BPFTOOL}" gen skeleton "${obj}" name "${name}" > "${skel}"
    DEPENDS "${obj}"
    COMMENT "BPF skeleton ${name}.skel.h"
    VERBATIM)
  add_custom_target(tt_bpf_${name}_gen DEPENDS "${skel}")
  add_library(tt_bpf_${name} INTERFACE)
  add_dependencies(tt_bpf_${name} tt_bpf_${name}_gen)
  # SYSTEM: the generated skeleton is C written by bpftool; first-party warning flags
  # (-Wold-style-cast, -Wconversion) must not fire inside it in the C++ that includes it.
  target_include_directories(tt_bpf_${name} SYSTEM INTERFACE "${TT_BPF_GEN_DIR}")
  target_include_directories(tt_bpf_${name} INTERFACE "${CMAKE_CURRENT_SOURCE_DIR}")
  target_link_libraries(tt_bpf_${name} INTERFACE PkgConfig::LIBBPF)
endfunction()
