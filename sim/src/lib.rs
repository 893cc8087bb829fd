//! Verilator simulation of Ferrite units (in progress).
