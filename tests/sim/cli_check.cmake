# Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
#
# cmake -DSIM=<saferetry-sim> -DVERSION=<project version> -P cli_check.cmake: bad flags exit 64 with a message
# naming the flag; --version prints "saferetry-sim VERSION"; the tail preset's JSON carries the hedging figures.
foreach(case "--clients;x;--clients" "--failure-rate;2;--failure-rate" "--jitter;wild;--jitter"
             "--loss-rate;-0.5;--loss-rate" "--slow-rate;2;--slow-rate"
             "--tail-rate;2;--tail-rate" "--tail-factor;0.5;--tail-factor"
             "--hedge-delay-ms;-5;--hedge-delay-ms")
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
  elseif(flag MATCHES "^--(tail|hedge)")
    set(preset tail)
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

execute_process(COMMAND ${SIM} --preset tail --json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "--preset tail --json: exit ${rc} (${err})")
endif()
foreach(field p99_ms_no_hedge p99_ms_hedged extra_request_ratio)
  if(NOT out MATCHES "\"${field}\":[0-9.]+")
    message(FATAL_ERROR "--preset tail --json: no ${field} in ${out}")
  endif()
endforeach()

execute_process(COMMAND ${SIM} --version RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out STREQUAL "saferetry-sim ${VERSION}\n" OR NOT err STREQUAL "")
  message(FATAL_ERROR "--version: exit ${rc}, printed \"${out}\" (${err}), expected \"saferetry-sim ${VERSION}\"")
endif()
