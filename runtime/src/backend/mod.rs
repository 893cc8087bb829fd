//! [`crate::Device`] implementations.
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod icarus;
#[cfg(feature = "opencl")]
pub mod opencl;
#[cfg(target_os = "linux")]
pub mod pynq;
pub mod sim;
#[cfg(feature = "xrt")]
pub mod xrt;

/// The first CUDA GPU as a [`crate::Device`]. Without the `cuda` feature, or
/// without a driver or GPU, this is an error that says which, never a panic.
pub fn open_cuda() -> Result<Box<dyn crate::Device>, crate::DeviceError> {
    #[cfg(feature = "cuda")]
    {
        Ok(Box::new(cuda::CudaDevice::new(0)?))
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(crate::DeviceError::MissingTool {
            tool: "the cuda backend",
            hint: "this ferrite was built without the `cuda` feature".into(),
        })
    }
}
