# Helpers that give every kvindex target the same warnings and include root.

set(KVINDEX_WARNINGS -Wall -Wextra -Werror)
# GCC 12 reports false -Wrestrict positives inside libstdc++ string copies at
# -O3 (GCC PR105329); the warning is off for GCC only.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  list(APPEND KVINDEX_WARNINGS -Wno-restrict)
endif()
# Locking rules are annotations (ABSL_GUARDED_BY, shared/base/mutex.h) that
# only clang checks; a clang build fails on a broken rule.
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  list(APPEND KVINDEX_WARNINGS -Wthread-safety -Wthread-safety-beta)
endif()

# kvindex_library(NAME SOURCES a.cc b.cc DEPS x y)
function(kvindex_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/generated)
  target_compile_options(${name} PRIVATE ${KVINDEX_WARNINGS})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# kvindex_executable(NAME SOURCES a.cc DEPS x y)
function(kvindex_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/generated)
  target_compile_options(${name} PRIVATE ${KVINDEX_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
endfunction()

# kvindex_test(NAME SOURCES a_test.cc DEPS x LABELS unit [TIMEOUT s])
function(kvindex_test name)
  if(NOT KVINDEX_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/generated)
  target_compile_options(${name} PRIVATE ${KVINDEX_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  add_test(NAME ${name} COMMAND ${name})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "KVINDEX_SOURCE_DIR=${PROJECT_SOURCE_DIR};KVINDEX_BINARY_DIR=${PROJECT_BINARY_DIR}")
endfunction()

# kvindex_fuzzer(NAME SOURCES f.cc DEPS x): built only with KVINDEX_FUZZ under clang.
function(kvindex_fuzzer name)
  if(NOT KVINDEX_FUZZ)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/generated)
  target_compile_options(${name} PRIVATE ${KVINDEX_WARNINGS} -fsanitize=fuzzer)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
endfunction()

# kvindex_add_subcommands(PREFIX kvindex_ctl SUBDIRS a b LIBS out_libs DEFS out_defs):
# adds each existing SUBDIR (which defines library ${PREFIX}_<dir>) and returns
# the libraries to link and the KVINDEX_<SUFFIX>_HAVE_<DIR>=1 definitions that
# tell main.cc which subcommands exist.
function(kvindex_add_subcommands)
  cmake_parse_arguments(ARG "" "PREFIX;LIBS;DEFS" "SUBDIRS" ${ARGN})
  string(REPLACE "kvindex_" "" suffix ${ARG_PREFIX})
  string(TOUPPER ${suffix} suffix)
  set(libs "")
  set(defs "")
  foreach(sub ${ARG_SUBDIRS})
    if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${sub}/CMakeLists.txt)
      add_subdirectory(${sub})
      string(TOUPPER ${sub} sub_upper)
      list(APPEND libs ${ARG_PREFIX}_${sub})
      list(APPEND defs KVINDEX_${suffix}_HAVE_${sub_upper}=1)
    endif()
  endforeach()
  set(${ARG_LIBS} ${libs} PARENT_SCOPE)
  set(${ARG_DEFS} ${defs} PARENT_SCOPE)
endfunction()
