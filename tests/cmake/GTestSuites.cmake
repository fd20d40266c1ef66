# GoogleTest binaries as one ctest test per test suite (`Row.*`, `ShmBackend.*`)
# rather than one per test case. Each process of ddpbench_tests pays ~0.9 s of
# LibTorch's start-up (its operator registry and CUDA libraries) before its
# first test: one process per case spent more time starting than testing. A
# suite's cases share one process, so they must not leave state behind for the
# next (the whole binary run at once passes too). One failing case fails its
# suite's test, and gtest's output names the case.
#
#   ddpbench_add_gtest_suites(TARGET [TIMEOUT seconds])
#
# Like gtest_discover_tests, the suites are listed from the built binary
# (--gtest_list_tests) after each link, into a file ctest includes.
set(_DDPBENCH_GTEST_SUITES_LIST "${CMAKE_CURRENT_LIST_DIR}/gtest_suites_list.cmake")

function(ddpbench_add_gtest_suites target)
  cmake_parse_arguments(ARG "" "TIMEOUT" "" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  set(tests_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake")
  set(include_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites_include.cmake")
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -D "BINARY=$<TARGET_FILE:${target}>" -D "OUT=${tests_file}"
            -D "TIMEOUT=${ARG_TIMEOUT}" -P "${_DDPBENCH_GTEST_SUITES_LIST}"
    BYPRODUCTS "${tests_file}" VERBATIM)
  file(WRITE "${include_file}"
    "if(EXISTS \"${tests_file}\")\n  include(\"${tests_file}\")\n"
    "else()\n  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${include_file}")
endfunction()
