# tt_add_role_subdirectories(): adds every immediate subfolder that has a CMakeLists.txt. The tree
# is split one folder per role (daemon/migrate, tests/unit/migrate, ...); a new role is a new
# folder, with no shared list to edit. Target references resolve at generate time, so order is free.
function(tt_add_role_subdirectories)
  file(GLOB children LIST_DIRECTORIES true CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/*/CMakeLists.txt")
  list(SORT children)
  foreach(child ${children})
    get_filename_component(dir "${child}" DIRECTORY)
    add_subdirectory("${dir}")
  endforeach()
endfunction()
