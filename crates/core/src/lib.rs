//! Gantry's resource model and scheduling core.
