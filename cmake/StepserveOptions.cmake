# Compiler flags shared by every target, and small helpers.

add_compile_options(-Wall -Wextra -Wno-unused-parameter
                    $<$<COMPILE_LANGUAGE:CXX>:-Wno-missing-field-initializers>)

if(STEPSERVE_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# Adds every immediate subfolder of DIR that has a CMakeLists.txt, in name order, so new
# modules join the build without editing a shared list.
function(stepserve_add_subdirectories dir)
  file(GLOB _children LIST_DIRECTORIES true RELATIVE "${PROJECT_SOURCE_DIR}/${dir}"
       "${PROJECT_SOURCE_DIR}/${dir}/*")
  list(SORT _children)
  foreach(_child IN LISTS _children)
    if(EXISTS "${PROJECT_SOURCE_DIR}/${dir}/${_child}/CMakeLists.txt")
      add_subdirectory("${PROJECT_SOURCE_DIR}/${dir}/${_child}"
                       "${PROJECT_BINARY_DIR}/${dir}/${_child}")
    endif()
  endforeach()
endfunction()

# stepserve_add_test(NAME name SOURCES ... LIBS ... [LABELS ...])
# One gtest executable registered with ctest; tests see STEPSERVE_SHARED_DIR and the binary dir.
function(stepserve_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main GTest::gmock)
  target_compile_definitions(${T_NAME} PRIVATE
    STEPSERVE_SHARED_DIR="${STEPSERVE_SHARED_DIR}"
    STEPSERVE_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    STEPSERVE_BINARY_DIR="${PROJECT_BINARY_DIR}")
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT})
  if(T_LABELS)
    set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}")
  endif()
endfunction()
