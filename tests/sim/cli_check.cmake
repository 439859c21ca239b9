# Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
#
# cmake -DSIM=<saferetry-sim> -P cli_check.cmake: bad flags exit 64 with a message naming the flag.
foreach(case "--clients;x;--clients" "--failure-rate;2;--failure-rate" "--jitter;wild;--jitter"
             "--loss-rate;-0.5;--loss-rate" "--slow-rate;2;--slow-rate")
  list(GET case 0 flag)
  list(GET case 1 value)
  list(GET case 2 expected)
  set(preset brown-out)
  if(flag STREQUAL "--clients" OR flag STREQUAL "--jitter")
    set(preset contention)
  elseif(flag STREQUAL "--loss-rate")
    set(preset lost-responses)
  elseif(flag STREQUAL "--slow-rate")
    set(preset hang)
  endif()
  execute_process(COMMAND ${SIM} --preset ${preset} ${flag} ${value}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 64)
    message(FATAL_ERROR "${flag} ${value}: exit ${rc}, expected 64 (${err})")
  endif()
  string(FIND "${err}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${flag} ${value}: message does not name the flag: ${err}")
  endif()
endforeach()
