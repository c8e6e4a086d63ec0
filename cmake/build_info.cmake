# The generated base/build_info.cc: a target that rewrites it on every build, but only when its
# content changed (the commit moved), so an unchanged tree relinks nothing.
set(DTRUN_BUILD_INFO_CC ${PROJECT_BINARY_DIR}/generated/build_info.cc)
set(_torch "none")
set(_cuda "none")
if(DTRUN_WITH_TORCH AND DEFINED Torch_VERSION)
  set(_torch ${Torch_VERSION})
  if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
    if(DEFINED CUDAToolkit_VERSION)
      set(_cuda ${CUDAToolkit_VERSION})
    elseif(DEFINED CUDA_VERSION)
      set(_cuda ${CUDA_VERSION})
    else()
      set(_cuda "yes")
    endif()
  endif()
endif()
add_custom_target(dtrun_build_info_gen
  COMMAND ${CMAKE_COMMAND} -DOUT=${DTRUN_BUILD_INFO_CC} -DSRC=${PROJECT_SOURCE_DIR}
          -DVERSION=${PROJECT_VERSION} -DTORCH=${_torch} -DCUDA=${_cuda}
          "-DCOMPILER=${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}"
          -P ${PROJECT_SOURCE_DIR}/cmake/write_build_info.cmake
  BYPRODUCTS ${DTRUN_BUILD_INFO_CC}
  COMMENT "" VERBATIM)
add_library(dtrun_build_info STATIC ${PROJECT_SOURCE_DIR}/base/build_info.cc ${DTRUN_BUILD_INFO_CC})
set_target_properties(dtrun_build_info PROPERTIES UNITY_BUILD OFF)
target_include_directories(dtrun_build_info PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(dtrun_build_info PRIVATE dtrun_absl::strings)
add_dependencies(dtrun_build_info dtrun_build_info_gen)
