//! Subnet math and NIC selection.
