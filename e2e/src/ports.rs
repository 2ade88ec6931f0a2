//! Free loopback ports, never handed out twice by one test binary.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::sync::Mutex;

/// Ports handed out by this test binary, never handed out twice.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// `N` distinct free ports on 127.0.0.1: bound on port 0, read, and released together.
pub fn free_ports<const N: usize>() -> [u16; N] {
    let mut handed_out = HANDED_OUT.lock().expect("port registry poisoned");
    let mut listeners = Vec::new();
    let mut ports = Vec::new();
    while ports.len() < N {
        assert!(listeners.len() < 100 * N, "no free ports on 127.0.0.1");
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1:0");
        let port = listener.local_addr().expect("a bound address").port();
        listeners.push(listener);
        if handed_out.insert(port) {
            ports.push(port);
        }
    }
    drop(listeners);
    ports.try_into().expect("exactly N ports")
}
