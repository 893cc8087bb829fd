//! Xilinx `.bit` files: the header Vivado writes, and the raw `.bin` the
//! Linux FPGA manager loads.
//!
//! A `.bit` is a 13-byte preamble, then tagged fields: `a` design, `b` part,
//! `c` date, `d` time (each a big-endian u16 length and a NUL-terminated
//! string) and `e` (a big-endian u32 length and the configuration data). The
//! Zynq FPGA managers want only that data, with every 32-bit word byte-swapped
//! (the zynq driver looks for the sync word as bytes `66 55 99 AA`); PYNQ
//! makes the same conversion before it writes `/lib/firmware`.

/// Leading bytes of every `.bit` file (the sync header of its first field).
pub const BIT_MAGIC: [u8; 13] = [0x00, 0x09, 0x0f, 0xf0, 0x0f, 0xf0, 0x0f, 0xf0, 0x0f, 0xf0, 0x00, 0x00, 0x01];

/// The configuration sync word, as it appears in a `.bit`'s data.
const SYNC_WORD: [u8; 4] = [0xAA, 0x99, 0x55, 0x66];

/// The fields of a parsed `.bit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BitFile<'a> {
    /// Design name and tool options (`a`), e.g. `overlay_wrapper;UserID=0XFFFFFFFF;Version=2022.1`.
    pub design: String,
    /// Part without speed grade (`b`), e.g. `7z020clg400`.
    pub part: String,
    pub date: String,
    pub time: String,
    /// The configuration data (`e`).
    pub data: &'a [u8],
}

impl<'a> BitFile<'a> {
    /// Parse a `.bit`; errors say which field is missing or truncated.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, String> {
        if !bytes.starts_with(&BIT_MAGIC) {
            return Err("not a Xilinx .bit bitstream (bad header)".into());
        }
        let mut rest = &bytes[BIT_MAGIC.len()..];
        let mut take = |n: usize, what: &str| -> Result<&'a [u8], String> {
            if rest.len() < n {
                return Err(format!("truncated .bit: {what} needs {n} bytes, {} left", rest.len()));
            }
            let (head, tail) = rest.split_at(n);
            rest = tail;
            Ok(head)
        };
        let mut strings = Vec::with_capacity(4);
        for key in [b'a', b'b', b'c', b'd'] {
            let tag = take(1, "a field tag")?[0];
            if tag != key {
                return Err(format!("field `{}` where `{}` was expected", tag as char, key as char));
            }
            let len = u16::from_be_bytes(take(2, "a field length")?.try_into().expect("2 bytes")) as usize;
            let text = take(len, "a header string")?;
            strings.push(String::from_utf8_lossy(text.strip_suffix(&[0]).unwrap_or(text)).into_owned());
        }
        if take(1, "the data tag")?[0] != b'e' {
            return Err("no `e` (configuration data) field after the header strings".into());
        }
        let len = u32::from_be_bytes(take(4, "the data length")?.try_into().expect("4 bytes")) as usize;
        let data = take(len, "the configuration data")?;
        if !len.is_multiple_of(4) {
            return Err(format!("configuration data of {len} bytes is not whole 32-bit words"));
        }
        if !data.chunks_exact(4).any(|w| w == SYNC_WORD) {
            return Err("the configuration data has no sync word (AA995566)".into());
        }
        let mut it = strings.into_iter();
        let mut next = || it.next().unwrap_or_default();
        Ok(Self { design: next(), part: next(), date: next(), time: next(), data })
    }

    /// The data as the FPGA manager loads it: every 32-bit word byte-swapped.
    pub fn fpga_manager_bin(&self) -> Vec<u8> {
        self.data.chunks_exact(4).flat_map(|w| [w[3], w[2], w[1], w[0]]).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal well-formed `.bit` for `part` with `words` of data after the sync word.
    fn fake_bit(part: &str, words: &[u32]) -> Vec<u8> {
        let mut v = BIT_MAGIC.to_vec();
        for (key, text) in
            [(b'a', "overlay_wrapper;UserID=0XFFFFFFFF"), (b'b', part), (b'c', "2026/11/23"), (b'd', "03:00:00")]
        {
            v.push(key);
            v.extend_from_slice(&(text.len() as u16 + 1).to_be_bytes());
            v.extend_from_slice(text.as_bytes());
            v.push(0);
        }
        let mut data = vec![0xFF; 8];
        data.extend_from_slice(&SYNC_WORD);
        for w in words {
            data.extend_from_slice(&w.to_be_bytes());
        }
        v.push(b'e');
        v.extend_from_slice(&(data.len() as u32).to_be_bytes());
        v.extend_from_slice(&data);
        v
    }

    #[test]
    fn parses_the_header_and_swaps_every_word() {
        let bytes = fake_bit("7z020clg400", &[0x3000_8001, 0x0000_0007]);
        let bit = BitFile::parse(&bytes).unwrap();
        assert_eq!(bit.part, "7z020clg400");
        assert_eq!(bit.date, "2026/11/23");
        assert!(bit.design.starts_with("overlay_wrapper"));
        assert_eq!(bit.data.len(), 20);
        let bin = bit.fpga_manager_bin();
        assert_eq!(&bin[8..12], &[0x66, 0x55, 0x99, 0xAA], "the sync word as the zynq driver looks for it");
        assert_eq!(&bin[12..16], &[0x01, 0x80, 0x00, 0x30]);
        assert_eq!(&bin[16..20], &[0x07, 0x00, 0x00, 0x00]);
    }

    #[test]
    fn refuses_truncated_and_malformed_files() {
        let good = fake_bit("7z020clg400", &[1, 2]);
        assert!(BitFile::parse(b"not a bitstream").unwrap_err().contains("bad header"));
        let e = BitFile::parse(&good[..good.len() - 3]).unwrap_err();
        assert!(e.contains("truncated"), "{e}");
        let mut no_sync = good.clone();
        let at = no_sync.windows(4).position(|w| w == SYNC_WORD).unwrap();
        no_sync[at] = 0;
        assert!(BitFile::parse(&no_sync).unwrap_err().contains("sync word"));
        let mut bad_tag = good;
        bad_tag[BIT_MAGIC.len()] = b'x';
        assert!(BitFile::parse(&bad_tag).unwrap_err().contains("`x`"));
    }
}
