//! `.npy` round trips and the errors users see for wrong files.
use ferrite_host::npy::{self, NpyError};
use ferrite_hw::gemm::GemmOutput;
use ndarray::{array, Array1, Array2};
use ndarray_npy::write_npy;

#[test]
fn round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let a = array![[-128i8, 0, 127], [1, -1, 5]];
    let path = dir.path().join("a.npy");
    write_npy(&path, &a).unwrap();
    assert_eq!(npy::read_i8_matrix(&path).unwrap(), a);

    let bias: Array1<i32> = array![i32::MIN, 0, i32::MAX];
    let path = dir.path().join("bias.npy");
    write_npy(&path, &bias).unwrap();
    assert_eq!(npy::read_i32_vector(&path).unwrap(), bias);

    for out in [GemmOutput::I32(vec![i32::MIN, -1, 0, 1, 2, i32::MAX]), GemmOutput::I8(vec![-128, -1, 0, 1, 2, 127])] {
        let path = dir.path().join("c.npy");
        npy::write_output(&path, &out, 2, 3).unwrap();
        let back = match out {
            GemmOutput::I32(_) => {
                GemmOutput::I32(ndarray_npy::read_npy::<_, Array2<i32>>(&path).unwrap().into_raw_vec())
            }
            GemmOutput::I8(_) => GemmOutput::I8(npy::read_i8_matrix(&path).unwrap().into_raw_vec()),
        };
        assert_eq!(back, out);
    }
}

#[test]
fn wrong_dtype_and_rank_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.npy");
    write_npy(&path, &array![[1.0f32, 2.0]]).unwrap();
    let err = npy::read_i8_matrix(&path).unwrap_err();
    assert!(matches!(err, NpyError::Dtype { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("f.npy") && msg.contains("<f4") && msg.contains("int8"), "{msg}");

    let path = dir.path().join("v.npy");
    write_npy(&path, &array![1i8, 2, 3]).unwrap();
    let err = npy::read_i8_matrix(&path).unwrap_err();
    assert!(matches!(err, NpyError::Rank { found: 1, expected: 2, .. }), "{err:?}");

    let err = npy::read_i8_matrix(&dir.path().join("missing.npy")).unwrap_err();
    assert!(err.to_string().contains("missing.npy"), "{err}");

    let err = npy::write_output(&dir.path().join("c.npy"), &GemmOutput::I8(vec![0; 5]), 2, 3).unwrap_err();
    assert!(matches!(err, NpyError::Shape { len: 5, m: 2, n: 3, .. }), "{err:?}");
}
