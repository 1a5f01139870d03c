# CUDA is enabled when a CUDA compiler is found (or forced with -DMT_WITH_CUDA=ON). It must
# configure and build on machines without a GPU; the backend checks for a device at run time.
include(CheckLanguage)
set(MT_HAVE_CUDA OFF)
if(NOT MT_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Data-centre and cloud GPUs: T4 (sm_75), A100/A30 (sm_80), A10/A10G (sm_86), L4/L40S
      # (sm_89), H100/H200 (sm_90), B200 (sm_100), and sm_100 PTX for newer GPUs to compile at
      # load. CUDA 13 has no Volta (V100, sm_70): build those with CUDA 12 and
      # -DCMAKE_CUDA_ARCHITECTURES=70.
      set(CMAKE_CUDA_ARCHITECTURES 75-real 80-real 86-real 89-real 90-real 100-real 100-virtual)
    endif()
    enable_language(CUDA)
    # CMake 3.25 does not know nvcc 13's C++20 support; the .cu files need only C++17.
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    # cuDNN 9 ships with the toolkit here (/usr/local/cuda); CUDNN_ROOT points elsewhere.
    find_path(MT_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
              PATH_SUFFIXES include)
    find_library(MT_CUDNN_LIBRARY cudnn HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_LIBRARY_DIR}
                 PATH_SUFFIXES lib64 lib)
    if(MT_CUDNN_INCLUDE_DIR AND MT_CUDNN_LIBRARY AND TARGET CUDA::cublas)
      add_library(mt_cudnn INTERFACE IMPORTED)
      target_include_directories(mt_cudnn INTERFACE ${MT_CUDNN_INCLUDE_DIR})
      target_link_libraries(mt_cudnn INTERFACE ${MT_CUDNN_LIBRARY})
      set(MT_HAVE_CUDA ON)
      message(STATUS "mpi_trainer: cuDNN ${MT_CUDNN_LIBRARY}")
    elseif(MT_WITH_CUDA STREQUAL "ON")
      message(FATAL_ERROR "MT_WITH_CUDA=ON but cuDNN or cuBLAS was not found (set CUDNN_ROOT)")
    else()
      message(STATUS "mpi_trainer: nvcc found but no cuDNN/cuBLAS: building without the CUDA backend")
    endif()
  elseif(MT_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MT_WITH_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "mpi_trainer: CUDA backend ${MT_HAVE_CUDA}")
