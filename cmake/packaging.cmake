# What `cmake --install` puts where, and the Debian packages made from it (CPack's DEB generator:
# `scripts/build-deb.sh`). Two packages, so that a node running Python scripts with its own PyTorch
# gets the launcher without Debian's LibTorch (~320 packages, 1 GB):
#   dtrun           bin/dtrun; lib/dtrun/: the gRPC module multi-node jobs load, and python/dtrun,
#                   the `dtrun` Python module (a .pth file in Debian's dist-packages points python3
#                   at it; dtrun puts that directory, alone, on its workers' PYTHONPATH, so a venv
#                   finds it without seeing Debian's other modules); dtrun's man page; bash and zsh
#                   completion (`dtrun completion`)
#   dtrun-trainers  bin/: train_imagenet and train_recsys (built with LibTorch), dtdata, dtplot, and
#                   their man pages (help2man, from --help)
include(GNUInstallDirs)
set(_launcher COMPONENT launcher)
set(_trainers COMPONENT trainers)

install(TARGETS dtrun RUNTIME DESTINATION bin ${_launcher})
install(TARGETS dtrun_rdzv_grpc LIBRARY DESTINATION lib/dtrun ${_launcher})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/dtrun DESTINATION lib/dtrun/python ${_launcher}
        FILES_MATCHING PATTERN "*.py")
# The prefix is known only at install time (CPack installs under /usr).
install(CODE [[
  file(WRITE "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}/lib/python3/dist-packages/dtrun.pth"
       "${CMAKE_INSTALL_PREFIX}/lib/dtrun/python\n")
]] ${_launcher})

set(_trainer_programs dtdata)
if(DTRUN_WITH_TORCH)
  list(APPEND _trainer_programs train_imagenet train_recsys)
endif()
install(TARGETS ${_trainer_programs} RUNTIME DESTINATION bin ${_trainers})
install(PROGRAMS ${PROJECT_SOURCE_DIR}/python/dtplot.py DESTINATION bin RENAME dtplot ${_trainers})

# Man pages and completion scripts, made by running the built programs (target `package_files`,
# part of the default build so that the package tests find them).
set(_pkg ${PROJECT_BINARY_DIR}/package)
set(_package_files)
find_program(HELP2MAN help2man)
# docs/man/PROGRAM.h2m adds sections help2man cannot read from --help; dtrun's page also gets each
# subcommand's --help.
function(dtrun_man_page program component description)
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
  install(FILES ${page}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT ${component})
  set(_package_files ${_package_files} ${page}.gz PARENT_SCOPE)
endfunction()
if(HELP2MAN)
  dtrun_man_page(dtrun launcher "launch distributed PyTorch training (torchrun-compatible)")
  dtrun_man_page(dtdata trainers "dataset tools for dtrun's trainers")
  dtrun_man_page(dtplot trainers "PNG charts from training runs' metrics")
  if(DTRUN_WITH_TORCH)
    dtrun_man_page(train_imagenet trainers "ResNet training with DDP over the dtrun input pipeline")
    dtrun_man_page(train_recsys trainers "neural collaborative filtering with DDP on MovieLens-style ratings")
  endif()
endif()
add_custom_command(OUTPUT ${_pkg}/completion/dtrun ${_pkg}/completion/_dtrun
  COMMAND ${CMAKE_COMMAND} -E make_directory ${_pkg}/completion
  COMMAND sh -c "\"$1\" completion bash > \"$2\" && \"$1\" completion zsh > \"$3\"" sh
          $<TARGET_FILE:dtrun> ${_pkg}/completion/dtrun ${_pkg}/completion/_dtrun
  DEPENDS dtrun VERBATIM)
install(FILES ${_pkg}/completion/dtrun DESTINATION share/bash-completion/completions ${_launcher})
install(FILES ${_pkg}/completion/_dtrun DESTINATION share/zsh/vendor-completions ${_launcher})
add_custom_command(OUTPUT ${_pkg}/changelog.Debian.gz
  COMMAND gzip -9nc ${PROJECT_SOURCE_DIR}/docs/package/changelog.Debian > ${_pkg}/changelog.Debian.gz
  DEPENDS ${PROJECT_SOURCE_DIR}/docs/package/changelog.Debian VERBATIM)
foreach(package dtrun dtrun-trainers)
  set(component launcher)
  if(package STREQUAL "dtrun-trainers")
    set(component trainers)
  endif()
  install(FILES ${PROJECT_SOURCE_DIR}/docs/package/copyright ${_pkg}/changelog.Debian.gz
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${package} COMPONENT ${component})
endforeach()
add_custom_target(package_files ALL DEPENDS ${_package_files} ${_pkg}/completion/dtrun ${_pkg}/completion/_dtrun
                                            ${_pkg}/changelog.Debian.gz dtplot)

set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL launcher trainers)
set(CPACK_PACKAGE_NAME dtrun)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "dtrun developers <dtrun@example.org>")
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/dtrun/dtrun")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
# Shared libraries' packages come from dpkg-shlibdeps (gRPC, protobuf, LibTorch, TurboJPEG, …).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_DEBIAN_LAUNCHER_PACKAGE_NAME dtrun)
set(CPACK_DEBIAN_LAUNCHER_PACKAGE_SECTION utils)
set(CPACK_COMPONENT_LAUNCHER_DESCRIPTION
  "torchrun-compatible launcher for distributed PyTorch training
dtrun starts and supervises the workers of a PyTorch DDP job on one machine
or many: torchrun's flags and environment, restarts in milliseconds, no stray
processes, in-memory snapshots so that a crash loses at most a step, hang and
straggler detection with job-wide stacks, a live `dtrun status`, Prometheus
metrics, Slurm and Kubernetes. It links no LibTorch: Python workers use
whichever PyTorch their interpreter imports.")
set(CPACK_DEBIAN_LAUNCHER_PACKAGE_DEPENDS "python3")
set(CPACK_DEBIAN_LAUNCHER_PACKAGE_RECOMMENDS "python3-torch")
set(CPACK_DEBIAN_LAUNCHER_PACKAGE_SUGGESTS "dtrun-trainers, slurm-client")

set(CPACK_DEBIAN_TRAINERS_PACKAGE_NAME dtrun-trainers)
set(CPACK_DEBIAN_TRAINERS_PACKAGE_SECTION science)
set(CPACK_COMPONENT_TRAINERS_DESCRIPTION
  "C++ DDP trainers and dataset tools for dtrun
train_imagenet (ResNets with DDP, AMP, checkpoints and in-memory snapshots
over a TurboJPEG input pipeline) and train_recsys (neural collaborative
filtering), built on Debian's LibTorch; dtdata makes and packs their datasets
and dtplot draws charts from their metrics.")
set(CPACK_DEBIAN_TRAINERS_PACKAGE_DEPENDS "dtrun (= ${PROJECT_VERSION}-1), python3")
# An optimised BLAS for LibTorch's matrix products (libtorch only recommends one: see worker/blas_check.h).
set(CPACK_DEBIAN_TRAINERS_PACKAGE_RECOMMENDS "python3-matplotlib, libopenblas0 | libblis4 | libmkl-rt")
include(CPack)
