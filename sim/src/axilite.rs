//! An AXI4-Lite master for the `s_axi_control` port.
//!
//! Register accesses go through real handshakes, cycle by cycle, so the
//! unit's control slave is exercised exactly as the platform's would be.
use ferrite_hw::vitis::{Inputs, Outputs};

/// One register access in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Write { offset: u32, value: u32 },
    Read { offset: u32 },
}

/// How an access ended: read data (0 for writes) and the slave's response code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub data: u32,
    pub resp: u8,
}

/// Drives at most one access at a time. Address and data of a write are
/// presented together; each channel drops its valid after its own handshake.
#[derive(Debug, Default)]
pub struct AxiLiteMaster {
    access: Option<Access>,
    addr_done: bool,
    data_done: bool,
}

impl AxiLiteMaster {
    /// Starts an access, abandoning any unfinished one (after a timeout).
    pub fn start(&mut self, access: Access) {
        *self = Self { access: Some(access), ..Self::default() };
    }

    /// Stops driving (used on reset and after a timeout).
    pub fn abort(&mut self) {
        *self = Self::default();
    }

    pub fn busy(&self) -> bool {
        self.access.is_some()
    }

    /// Sets the `ctrl_*` fields of `inputs` for this cycle.
    pub fn drive(&self, inputs: &mut Inputs) {
        inputs.ctrl_awvalid = 0;
        inputs.ctrl_wvalid = 0;
        inputs.ctrl_arvalid = 0;
        inputs.ctrl_bready = 0;
        inputs.ctrl_rready = 0;
        match self.access {
            Some(Access::Write { offset, value }) => {
                inputs.ctrl_awvalid = (!self.addr_done).into();
                inputs.ctrl_awaddr = offset;
                inputs.ctrl_wvalid = (!self.data_done).into();
                inputs.ctrl_wdata = value;
                inputs.ctrl_wstrb = 0xF;
                inputs.ctrl_bready = 1;
            }
            Some(Access::Read { offset }) => {
                inputs.ctrl_arvalid = (!self.addr_done).into();
                inputs.ctrl_araddr = offset;
                inputs.ctrl_rready = 1;
            }
            None => {}
        }
    }

    /// Records this cycle's handshakes (outputs settled before the edge);
    /// returns the completion when the response handshake happens.
    pub fn observe(&mut self, inputs: &Inputs, outputs: &Outputs) -> Option<Completion> {
        let done = match self.access? {
            Access::Write { .. } => {
                self.addr_done |= inputs.ctrl_awvalid != 0 && outputs.ctrl_awready != 0;
                self.data_done |= inputs.ctrl_wvalid != 0 && outputs.ctrl_wready != 0;
                (outputs.ctrl_bvalid != 0).then_some(Completion { data: 0, resp: outputs.ctrl_bresp })
            }
            Access::Read { .. } => {
                self.addr_done |= inputs.ctrl_arvalid != 0 && outputs.ctrl_arready != 0;
                (outputs.ctrl_rvalid != 0).then_some(Completion { data: outputs.ctrl_rdata, resp: outputs.ctrl_rresp })
            }
        };
        if done.is_some() {
            self.abort();
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_drops_each_valid_after_its_handshake() {
        let mut m = AxiLiteMaster::default();
        m.start(Access::Write { offset: 0x10, value: 7 });
        let mut inp = Inputs::default();
        m.drive(&mut inp);
        assert_eq!((inp.ctrl_awvalid, inp.ctrl_wvalid, inp.ctrl_awaddr, inp.ctrl_wdata), (1, 1, 0x10, 7));
        // Slave takes the address only.
        let out = Outputs { ctrl_awready: 1, ..Outputs::default() };
        assert_eq!(m.observe(&inp, &out), None);
        m.drive(&mut inp);
        assert_eq!((inp.ctrl_awvalid, inp.ctrl_wvalid), (0, 1));
        let out = Outputs { ctrl_wready: 1, ..Outputs::default() };
        assert_eq!(m.observe(&inp, &out), None);
        m.drive(&mut inp);
        let out = Outputs { ctrl_bvalid: 1, ctrl_bresp: 0, ..Outputs::default() };
        assert_eq!(m.observe(&inp, &out), Some(Completion { data: 0, resp: 0 }));
        assert!(!m.busy());
        m.drive(&mut inp);
        assert_eq!((inp.ctrl_awvalid, inp.ctrl_wvalid, inp.ctrl_bready), (0, 0, 0));
    }

    #[test]
    fn read_returns_data_on_rvalid() {
        let mut m = AxiLiteMaster::default();
        m.start(Access::Read { offset: 0x20 });
        let mut inp = Inputs::default();
        m.drive(&mut inp);
        assert_eq!((inp.ctrl_arvalid, inp.ctrl_araddr, inp.ctrl_rready), (1, 0x20, 1));
        let out = Outputs { ctrl_arready: 1, ..Outputs::default() };
        assert_eq!(m.observe(&inp, &out), None);
        m.drive(&mut inp);
        assert_eq!(inp.ctrl_arvalid, 0);
        let out = Outputs { ctrl_rvalid: 1, ctrl_rdata: 0xdead_beef, ..Outputs::default() };
        assert_eq!(m.observe(&inp, &out), Some(Completion { data: 0xdead_beef, resp: 0 }));
    }
}
