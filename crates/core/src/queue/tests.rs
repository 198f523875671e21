//! Tests of the queue (filled below).
