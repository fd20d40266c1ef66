# Run by ddpbench_add_gtest_suites (GTestSuites.cmake) after a test binary is
# linked: writes OUT, one add_test per suite that BINARY --gtest_list_tests
# prints ("Suite." or "Prefix/Suite." lines; case lines are indented).
#   cmake -D BINARY=... -D OUT=... -D TIMEOUT=... -P gtest_suites_list.cmake
execute_process(COMMAND "${BINARY}" --gtest_list_tests
  OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE rc TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${BINARY} --gtest_list_tests failed (${rc}): ${errors}")
endif()
string(REPLACE "\n" ";" lines "${listing}")
set(body "")
set(count 0)
foreach(line IN LISTS lines)
  if(line MATCHES "^([A-Za-z0-9_/]+)\\.( +#.*)?$")
    set(suite "${CMAKE_MATCH_1}")
    string(APPEND body "add_test([=[${suite}.*]=] [=[${BINARY}]=] [=[--gtest_filter=${suite}.*]=])\n"
                       "set_tests_properties([=[${suite}.*]=] PROPERTIES TIMEOUT ${TIMEOUT})\n")
    math(EXPR count "${count} + 1")
  endif()
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "${BINARY} --gtest_list_tests listed no suite:\n${listing}")
endif()
file(WRITE "${OUT}" "${body}")
