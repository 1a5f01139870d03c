# Compiles through ccache when it is installed (launch/setup.sh installs Debian's): a clone built a
# second time, in any folder, compiles almost nothing, and the ULFM build reuses the release
# build's objects of every library that does not see MPI (core, nn, optim, data, the CPU and
# reference backends, ckpt). -DMT_CCACHE=OFF compiles directly; so does a machine without ccache.
#
# What makes a cache hit independent of the clone's folder:
# - CCACHE_BASEDIR = the source root: absolute paths under it on the command line (include
#   directories, the sources, the unity files' line markers) are hashed relative to it;
# - CCACHE_NOHASHDIR: the working directory is not hashed (the builds have -g in the sanitizer
#   preset; -ffile-prefix-map below makes their debug information relative instead);
# - -ffile-prefix-map=<source root>/= (every build, with or without ccache): __FILE__ in error
#   messages and the debug information's file names are relative to the source root, so the
#   preprocessed text no longer holds the clone's folder. Error messages read
#   "mpi_trainer/ps/exchange/shard.cpp:120" instead of the absolute path.
# The cache lives where ccache keeps it (~/.cache/ccache, 5 GB; CCACHE_DIR elsewhere); nvcc's
# compilations go through it too.
set(MT_CCACHE AUTO CACHE STRING "Compile through ccache: AUTO (when found), ON, OFF")
set_property(CACHE MT_CCACHE PROPERTY STRINGS AUTO ON OFF)

set(mt_prefix_map "-ffile-prefix-map=${PROJECT_SOURCE_DIR}/=")
add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${mt_prefix_map}>"
                    "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${mt_prefix_map}>")

set(MT_HAVE_CCACHE OFF)
if(NOT MT_CCACHE STREQUAL "OFF")
  find_program(MT_CCACHE_PROGRAM ccache)
  if(MT_CCACHE_PROGRAM)
    set(mt_launcher ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${PROJECT_SOURCE_DIR} CCACHE_NOHASHDIR=true
                    ${MT_CCACHE_PROGRAM})
    foreach(lang IN ITEMS C CXX CUDA)
      if(NOT CMAKE_${lang}_COMPILER_LAUNCHER)
        set(CMAKE_${lang}_COMPILER_LAUNCHER ${mt_launcher})
      endif()
    endforeach()
    set(MT_HAVE_CCACHE ON)
  elseif(MT_CCACHE STREQUAL "ON")
    message(FATAL_ERROR "MT_CCACHE=ON but ccache was not found (launch/setup.sh installs it)")
  endif()
endif()
message(STATUS "mpi_trainer: ccache ${MT_HAVE_CCACHE}")
