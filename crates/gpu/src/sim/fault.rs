//! Scriptable faults for the simulated fleet.

use std::time::Duration;

/// A fault to fire on a GPU at a time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fault {
    /// When it fires (backend time).
    pub at: Duration,
    /// GPU index.
    pub gpu: u32,
    /// What happens.
    pub kind: FaultKind,
}

/// The kinds of trouble a simulated GPU can be put in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// Report XID `n` (the GPU keeps working; whether it is critical is the health policy's call).
    Xid(u32),
    /// A corrected single-bit ECC error.
    SingleBitEcc,
    /// An uncorrectable double-bit ECC error (also remaps a row).
    DoubleBitEcc,
    /// Row remapping fails.
    RowRemapFailure,
    /// Thermal slowdown for this long: hot, clocks down, throttle reason set.
    ThermalThrottle(Duration),
    /// The GPU stops answering (samples and probes fail) until [`FaultKind::ReturnToBus`].
    FallOffBus,
    /// A lost GPU answers again.
    ReturnToBus,
}
