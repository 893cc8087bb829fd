/* XRT's C API as the xrt backend uses it; bindgen reads this (host/build.rs). */
#include <xrt/xrt_device.h>
#include <xrt/xrt_bo.h>
#include <xrt/xrt_kernel.h>
