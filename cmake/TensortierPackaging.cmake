# Installation of the service side (units, sysusers, sample config) and the Debian package.
#
#   cmake -S . -B build-pkg -DCMAKE_INSTALL_PREFIX=/usr -DTT_WERROR=ON && make -C build-pkg -j2 package
#   DESTDIR=/tmp/stage cmake --install build-pkg   # daemon, tensortierctl, units, config, client lib
#
# Binaries install from their own folders (daemon/service, tools/ctl, client_lib); this file adds
# what has no CMake folder of its own. Included last from the top CMakeLists.txt, so every
# install() rule exists before CPack reads them.

# Units and sysusers go under the prefix's lib/ (relative, so `cmake --install --prefix` moves
# them; the package uses /usr: /usr/lib/systemd/system). The sample config goes to the full
# sysconfdir, which GNUInstallDirs maps to /etc for prefix /usr: configure packaging builds with
# -DCMAKE_INSTALL_PREFIX=/usr, and stage other installs with DESTDIR.
install(FILES "${PROJECT_SOURCE_DIR}/systemd/tensortierd.service" "${PROJECT_SOURCE_DIR}/systemd/tensortierd.socket"
        DESTINATION lib/systemd/system COMPONENT service)
install(FILES "${PROJECT_SOURCE_DIR}/systemd/tensortier.sysusers" DESTINATION lib/sysusers.d
        RENAME tensortier.conf COMPONENT service)
install(FILES "${PROJECT_SOURCE_DIR}/systemd/tensortierd.conf"
        DESTINATION "${CMAKE_INSTALL_FULL_SYSCONFDIR}/tensortier" COMPONENT service)
if(EXISTS "${PROJECT_SOURCE_DIR}/README.md")
  install(FILES "${PROJECT_SOURCE_DIR}/README.md" DESTINATION "${CMAKE_INSTALL_DOCDIR}" COMPONENT service)
endif()

set(CPACK_PACKAGE_NAME "tensortier")
set(CPACK_PACKAGE_VENDOR "tensortier")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_CONTACT "tensortier maintainers <tensortier@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_GENERATOR "DEB")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION "admin")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
# Library dependencies (libnuma, libbpf, libpfm4, libprotobuf, libsystemd, libglpk) come from
# dpkg-shlibdeps on the built binaries; systemd provides sysusers and the units' runtime.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "systemd")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "Keeps the hot pages of deep-learning training processes in DRAM and the rest in a slow memory\n tier (persistent memory in KMEM mode, CXL): daemon (tensortierd), tensortierctl, client library.")
# conffiles keeps local edits of /etc/tensortier/tensortierd.conf across upgrades; the maintainer
# scripts create the group, and enable the socket.
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    "${CMAKE_CURRENT_LIST_DIR}/debian/conffiles;${CMAKE_CURRENT_LIST_DIR}/debian/postinst;${CMAKE_CURRENT_LIST_DIR}/debian/prerm;${CMAKE_CURRENT_LIST_DIR}/debian/postrm")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
set(CPACK_STRIP_FILES ON)  # the build type keeps debug info; the package does not need it
include(CPack)
