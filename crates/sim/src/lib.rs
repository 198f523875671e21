//! Trace-driven simulator on Gantry's scheduling core.
