# Abseil, shared or static by the linking target (issue 26: dtrun's start-up).
#
# Debian ships Abseil as 30-odd shared libraries, and loading them was most of `dtrun --help`'s
# 3.6 ms and a fifth of a 4-worker no-op launch. A target with the property DTRUN_STATIC_ABSL
# (the `dtrun` executable) links Debian's static archives instead; everything else -- and
# necessarily the gRPC module (libdtrun_rdzv_grpc.so: the archives are not built as PIC, and
# gRPC itself needs the shared libraries) -- links the shared ones. Both are the same Abseil
# release; what crosses between dtrun and the module is plain data, absl::Status and objects whose
# methods one side implements.
#
# Our CMakeLists name dtrun_absl::<component> where they would name absl::<component>.

define_property(TARGET PROPERTY DTRUN_STATIC_ABSL
                BRIEF_DOCS "Link Abseil's static archives (see cmake/absl_linkage.cmake)"
                FULL_DOCS "Set on executables whose start-up time matters.")

# The static archive beside each shared library of `target` and of every Abseil target it needs.
function(_dtrun_absl_archives target out)
  set(archives ${${out}})  # what the caller has: each archive once, dependencies after dependents
  get_target_property(deps ${target} INTERFACE_LINK_LIBRARIES)
  foreach(dep IN LISTS deps)
    if(TARGET ${dep} AND dep MATCHES "^absl::")
      _dtrun_absl_archives(${dep} archives)
    endif()
  endforeach()
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "SHARED_LIBRARY")
    get_target_property(configs ${target} IMPORTED_CONFIGURATIONS)
    list(GET configs 0 config)
    get_target_property(so ${target} IMPORTED_LOCATION_${config})
    string(REGEX REPLACE "\\.so(\\.[0-9.]+)?$" ".a" archive "${so}")
    if(NOT EXISTS "${archive}")
      set(archive "MISSING:${archive}")
    endif()
    list(APPEND archives "${archive}")
  endif()
  list(REMOVE_DUPLICATES archives)
  set(${out} ${archives} PARENT_SCOPE)
endfunction()

# dtrun_absl::<c> for each Abseil component the project uses.
function(dtrun_absl_components)
  set(archives "")
  foreach(c IN LISTS ARGN)
    _dtrun_absl_archives(absl::${c} archives)
  endforeach()
  add_library(dtrun_absl_static INTERFACE)
  set(missing ${archives})
  list(FILTER missing INCLUDE REGEX "^MISSING:")
  if(missing)
    # An Abseil without archives (some distributions ship only the shared libraries): shared it is.
    message(STATUS "dtrun: no static Abseil (${missing}); dtrun links the shared libraries")
    foreach(c IN LISTS ARGN)
      target_link_libraries(dtrun_absl_static INTERFACE absl::${c})
    endforeach()
  else()
    target_link_libraries(dtrun_absl_static INTERFACE "$<LINK_GROUP:RESCAN,${archives}>" Threads::Threads)
  endif()
  set(static "$<BOOL:$<TARGET_PROPERTY:DTRUN_STATIC_ABSL>>")
  foreach(c IN LISTS ARGN)
    add_library(dtrun_absl_${c} INTERFACE)
    target_include_directories(dtrun_absl_${c} SYSTEM INTERFACE
                               $<TARGET_PROPERTY:absl::${c},INTERFACE_INCLUDE_DIRECTORIES>)
    target_link_libraries(dtrun_absl_${c} INTERFACE "$<IF:${static},dtrun_absl_static,absl::${c}>")
    add_library(dtrun_absl::${c} ALIAS dtrun_absl_${c})
  endforeach()
endfunction()
