# What `cmake --install` puts where, and the Debian package made from it (CPack's DEB generator:
# `scripts/build-deb.sh`). One package, dtrun, under /usr:
#   bin/        dtrun, dtdata, dtplot and, built with LibTorch, train_imagenet and train_recsys
#   lib/dtrun/  the gRPC rendezvous module dtrun loads for multi-node jobs, and python/dtrun
#               (the `dtrun` Python module; a .pth file in Debian's dist-packages points python3
#               at it, and dtrun puts it on its workers' PYTHONPATH, so a venv finds it too
#               without seeing Debian's other modules)
#   share/      man pages (help2man, from --help), bash and zsh completion (`dtrun completion`)
include(GNUInstallDirs)

set(_programs dtrun dtdata)
if(DTRUN_WITH_TORCH)
  list(APPEND _programs train_imagenet train_recsys)
endif()
install(TARGETS ${_programs} RUNTIME DESTINATION bin)
install(PROGRAMS ${PROJECT_SOURCE_DIR}/python/dtplot.py DESTINATION bin RENAME dtplot)
install(TARGETS dtrun_rdzv_grpc LIBRARY DESTINATION lib/dtrun)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/dtrun DESTINATION lib/dtrun/python FILES_MATCHING PATTERN "*.py")
# The prefix is known only at install time (CPack installs under /usr).
install(CODE [[
  file(WRITE "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}/lib/python3/dist-packages/dtrun.pth"
       "${CMAKE_INSTALL_PREFIX}/lib/dtrun/python\n")
]])

# Man pages and completion scripts, made by running the built programs (target `package_files`,
# part of the default build so that the package test finds them).
set(_pkg ${PROJECT_BINARY_DIR}/package)
set(_man_pages)
find_program(HELP2MAN help2man)
# docs/man/PROGRAM.h2m adds sections help2man cannot read from --help; dtrun's page also gets each
# subcommand's --help.
function(dtrun_man_page program description)
  set(page ${_pkg}/man/${program}.1)
  add_custom_command(OUTPUT ${page}.gz
    COMMAND ${CMAKE_COMMAND} -E make_directory ${_pkg}/man
    COMMAND sh ${PROJECT_SOURCE_DIR}/scripts/man-include.sh ${PROJECT_BINARY_DIR}/bin/${program}
            ${PROJECT_SOURCE_DIR}/docs/man/${program}.h2m ${page}.h2m
    COMMAND ${HELP2MAN} --no-info --no-discard-stderr --section=1 --name=${description}
            --include=${page}.h2m --output=${page} ${PROJECT_BINARY_DIR}/bin/${program}
    COMMAND gzip -9nf ${page}
    DEPENDS ${program} ${PROJECT_SOURCE_DIR}/docs/man/${program}.h2m ${PROJECT_SOURCE_DIR}/scripts/man-include.sh
    VERBATIM)
  list(APPEND _man_pages ${page}.gz)
  set(_man_pages ${_man_pages} PARENT_SCOPE)
endfunction()
if(HELP2MAN)
  dtrun_man_page(dtrun "launch distributed PyTorch training (torchrun-compatible)")
  dtrun_man_page(dtdata "dataset tools for dtrun's trainers")
  dtrun_man_page(dtplot "PNG charts from training runs' metrics")
  if(DTRUN_WITH_TORCH)
    dtrun_man_page(train_imagenet "ResNet training with DDP over the dtrun input pipeline")
    dtrun_man_page(train_recsys "neural collaborative filtering with DDP on MovieLens-style ratings")
  endif()
  install(FILES ${_man_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 OPTIONAL)
endif()
add_custom_command(OUTPUT ${_pkg}/completion/dtrun ${_pkg}/completion/_dtrun
  COMMAND ${CMAKE_COMMAND} -E make_directory ${_pkg}/completion
  COMMAND sh -c "\"$1\" completion bash > \"$2\" && \"$1\" completion zsh > \"$3\"" sh
          $<TARGET_FILE:dtrun> ${_pkg}/completion/dtrun ${_pkg}/completion/_dtrun
  DEPENDS dtrun VERBATIM)
add_custom_target(package_files ALL DEPENDS ${_man_pages} ${_pkg}/completion/dtrun ${_pkg}/completion/_dtrun dtplot)
install(FILES ${_pkg}/completion/dtrun DESTINATION share/bash-completion/completions OPTIONAL)
install(FILES ${_pkg}/completion/_dtrun DESTINATION share/zsh/vendor-completions OPTIONAL)
install(FILES ${PROJECT_SOURCE_DIR}/docs/package/copyright DESTINATION ${CMAKE_INSTALL_DOCDIR})
add_custom_command(OUTPUT ${_pkg}/changelog.Debian.gz
  COMMAND gzip -9nc ${PROJECT_SOURCE_DIR}/docs/package/changelog.Debian > ${_pkg}/changelog.Debian.gz
  DEPENDS ${PROJECT_SOURCE_DIR}/docs/package/changelog.Debian VERBATIM)
add_custom_target(package_changelog ALL DEPENDS ${_pkg}/changelog.Debian.gz)
add_dependencies(package_files package_changelog)
install(FILES ${_pkg}/changelog.Debian.gz DESTINATION ${CMAKE_INSTALL_DOCDIR})

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME dtrun)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "dtrun developers <dtrun@example.org>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "torchrun-compatible launcher for distributed PyTorch training")
# The extended description (CPack puts the summary above it and indents it).
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
  "dtrun starts and supervises the workers of a PyTorch DDP job on one machine
or many: torchrun's flags and environment, restarts in milliseconds, no stray
processes, in-memory snapshots so that a crash loses at most a step, hang and
straggler detection with job-wide stacks, a live `dtrun status`, Prometheus
metrics, Slurm and Kubernetes.

Also included: the C++ DDP trainers train_imagenet and train_recsys, the
dataset tool dtdata and the chart tool dtplot.")
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/dtrun/dtrun")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
# Shared libraries found by dpkg-shlibdeps (LibTorch, gRPC, protobuf, TurboJPEG, …); python3 for
# the module and dtplot. Recommended: what Python workers and dtplot's charts import.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3-torch, python3-matplotlib")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "slurm-client")
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
