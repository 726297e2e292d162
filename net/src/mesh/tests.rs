//! The mesh backend's tests without RDMA: settings, and whole connections over sockets on
//! loopback (one host, two rails, IPv6, a stale nonce).

use super::*;
use weft_config::Settings;

fn mesh_config(pairs: &[(&str, &str)]) -> Result<MeshConfig, weft_config::ConfigError> {
    let pairs: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let lookup = move |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    Settings::from_lookup(&lookup).map(|s| MeshConfig::from_settings(&s.net.mesh))
}

#[test]
fn settings_and_speed_units() {
    let c = mesh_config(&[
        ("WEFT_MESH_IFNAME", "=eth1"),
        ("NCCL_MESH_GID_INDEX", "3"),
        ("NCCL_MESH_DEBUG", "1"),
    ])
    .unwrap();
    assert_eq!(
        c,
        MeshConfig {
            ifname: Some("=eth1".into()),
            gid_index: Some(3),
            debug: true,
            transport: Transport::Auto,
            max_rails: 8,
        }
    );
    let c = mesh_config(&[]).unwrap();
    assert_eq!(
        c,
        MeshConfig {
            ifname: None,
            gid_index: None,
            debug: false,
            transport: Transport::Auto,
            max_rails: 8,
        }
    );
    let c = mesh_config(&[("WEFT_MESH_TRANSPORT", "socket"), ("WEFT_MESH_RAILS", "2")]).unwrap();
    assert_eq!((c.transport, c.max_rails), (Transport::Socket, 2));
    let e = mesh_config(&[("WEFT_MESH_TRANSPORT", "rdma")])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("WEFT_MESH_TRANSPORT=\"rdma\": expected auto, ib or socket"),
        "{e}"
    );
    let e = mesh_config(&[("WEFT_MESH_RAILS", "9")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("WEFT_MESH_RAILS=\"9\""), "{e}");
    assert!(
        mesh_config(&[("NCCL_MESH_GID_INDEX", "x")])
            .unwrap_err()
            .to_string()
            .contains("NCCL_MESH_GID_INDEX=\"x\"")
    );
    assert_eq!(speed_unit(2_549), 2_500);
    assert_eq!(speed_unit(u32::MAX), MAX_SPEED_MBPS);
}

// ---- over sockets on loopback: no RDMA device, no VM --------------------------------

use std::time::{Duration, Instant};

fn socket_mesh(addrs: &[(&str, &str, u8)]) -> MeshNet {
    let nics = addrs
        .iter()
        .enumerate()
        .map(|(i, &(name, addr, prefix_len))| MeshNic {
            name: name.to_string(),
            index: i as u8,
            addr: addr.parse().unwrap(),
            prefix_len,
            speed_mbps: 10_000,
            port: None,
            reserve: false,
        })
        .collect();
    let socket = SocketConfig {
        threads: 2,
        connect_timeout: Duration::from_secs(20),
        ..SocketConfig::default()
    };
    let config = MeshConfig {
        ifname: None,
        gid_index: None,
        debug: false,
        transport: Transport::Socket,
        max_rails: 8,
    };
    MeshNet::with_nics(None, Vec::new(), socket, config, nics, &[]).unwrap()
}

/// Connects `connector` to a listen of `listener`, both polled from this thread.
fn connect_pair(
    listener: &MeshNet,
    connector: &MeshNet,
    handle: &NetHandle,
    listen: &mut MeshListenComm,
) -> (MeshSendComm, MeshRecvComm) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut send, mut recv, mut state) = (None, None, None);
    while send.is_none() || recv.is_none() {
        assert!(Instant::now() < deadline, "mesh connect over loopback hung");
        if send.is_none() {
            send = connector.connect(0, handle, &mut state).unwrap();
        }
        if recv.is_none() {
            recv = listener.accept(listen).unwrap();
        }
    }
    (send.unwrap(), recv.unwrap())
}

fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed * 7) >> 3) as u8 ^ (i as u8))
        .collect()
}

/// Sends `messages` (size, tag) in posting order, received in groups of `group`
/// buffers of capacity `cap(size)`; checks every byte and size, and with one rail that
/// the buffers' tails are untouched (with several, a part may land in the tail before
/// it is moved into place: see `stripe`).
fn exchange(
    tx: &MeshNet,
    rx: &MeshNet,
    send: &mut MeshSendComm,
    recv: &mut MeshRecvComm,
    messages: &[(usize, u32)],
    group: usize,
    cap: impl Fn(usize) -> usize,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    for (g, chunk) in messages.chunks(group).enumerate() {
        let data: Vec<Vec<u8>> = chunk
            .iter()
            .enumerate()
            .map(|(k, &(n, _))| pattern(n, g * 8 + k))
            .collect();
        let mut bufs: Vec<Vec<u8>> = chunk.iter().map(|&(n, _)| vec![0xa5; cap(n)]).collect();
        // Every buffer outlives its registration and its requests (all completed, or
        // the test failed, before this scope ends).
        let smr: Vec<MeshMemHandle> = data
            .iter()
            // SAFETY: see above.
            .map(|d| unsafe {
                tx.reg_mr(
                    CommRef::Send(&*send),
                    d.as_ptr().cast_mut(),
                    d.len(),
                    PtrKind::Host,
                )
            })
            .collect::<Result<_, _>>()
            .unwrap();
        let rmr: Vec<MeshMemHandle> = bufs
            .iter_mut()
            // SAFETY: see above.
            .map(|b| unsafe {
                rx.reg_mr(
                    CommRef::Recv(&*recv),
                    b.as_mut_ptr(),
                    b.len(),
                    PtrKind::Host,
                )
            })
            .collect::<Result<_, _>>()
            .unwrap();
        let rbufs: Vec<RecvBuffer<'_, MeshMemHandle>> = bufs
            .iter_mut()
            .zip(&rmr)
            .zip(chunk)
            .map(|((b, mr), &(_, tag))| RecvBuffer {
                data: b.as_mut_ptr(),
                size: b.len(),
                tag,
                mr,
            })
            .collect();
        let mut rreq = None;
        let mut sreqs: Vec<Option<MeshRequest>> = chunk.iter().map(|_| None).collect();
        let mut sdone = vec![false; chunk.len()];
        let mut got = None;
        // Post the sends in reverse order of the receive's buffers: tags match any order.
        while got.is_none() || sdone.iter().any(|d| !d) {
            assert!(
                Instant::now() < deadline,
                "mesh transfer over loopback hung"
            );
            if rreq.is_none() {
                // SAFETY: see above.
                rreq = unsafe { rx.irecv(recv, &rbufs) }.unwrap();
            }
            for k in (0..chunk.len()).rev() {
                if sreqs[k].is_none() && !sdone[k] {
                    let (n, tag) = chunk[k];
                    // SAFETY: see above.
                    sreqs[k] =
                        unsafe { tx.isend(send, data[k].as_ptr(), n, tag, &smr[k]) }.unwrap();
                }
                if let Some(r) = sreqs[k].as_mut() {
                    if let Some(c) = tx.test(r).unwrap() {
                        assert_eq!(c.sizes(), [chunk[k].0]);
                        sdone[k] = true;
                        sreqs[k] = None;
                    }
                }
            }
            if let Some(r) = rreq.as_mut() {
                if got.is_none() {
                    got = rx.test(r).unwrap();
                }
            }
        }
        let got = got.unwrap();
        let want: Vec<usize> = chunk.iter().map(|&(n, _)| n).collect();
        assert_eq!(got.sizes(), &want[..], "group {g}");
        for (k, b) in bufs.iter().enumerate() {
            let n = chunk[k].0;
            assert!(
                b[..n] == data[k][..],
                "group {g} buffer {k}: {n} bytes differ"
            );
            if send.rails.len() == 1 {
                assert!(
                    b[n..].iter().all(|&x| x == 0xa5),
                    "group {g} buffer {k}: tail written"
                );
            }
        }
        for m in smr {
            tx.dereg_mr(m).unwrap();
        }
        for m in rmr {
            rx.dereg_mr(m).unwrap();
        }
    }
}

const SIZES: [usize; 9] = [
    0,
    1,
    4095,
    65_537,
    100_003,
    1 << 20,
    (1 << 20) + 3,
    3_000_017,
    (16 << 20) - 5,
];

#[test]
fn sockets_on_one_host_every_byte() {
    let a = socket_mesh(&[("lo", "127.0.0.1", 8)]);
    let b = socket_mesh(&[("lo", "127.0.0.1", 8)]);
    let (handle, mut listen) = a.listen(0).unwrap();
    let (mut send, mut recv) = connect_pair(&a, &b, &handle, &mut listen);
    assert_eq!(send.rails().len(), 1);
    assert!(
        send.rails()[0].contains("127.0.0.1 over sockets"),
        "{:?}",
        send.rails()
    );
    assert!(send.rails()[0].contains("this host"), "{:?}", send.rails());
    let msgs: Vec<(usize, u32)> = SIZES.iter().map(|&n| (n, 7)).collect();
    exchange(&b, &a, &mut send, &mut recv, &msgs, 1, |n| n);
    exchange(&b, &a, &mut send, &mut recv, &msgs, 1, |n| n + 4099);
    let grouped: Vec<(usize, u32)> = (0..8).map(|k| (SIZES[k + 1], 100 + k as u32)).collect();
    exchange(&b, &a, &mut send, &mut recv, &grouped, 8, |n| n * 2 + 1);
    b.close_send(send).unwrap();
    a.close_recv(recv).unwrap();
    a.close_listen(listen).unwrap();
}

/// IPv6 end to end: the handle carries `::1/128`, the rail connects to it from it.
#[test]
fn sockets_over_ipv6() {
    let a = socket_mesh(&[("lo", "::1", 128)]);
    let b = socket_mesh(&[("lo", "::1", 128)]);
    let (handle, mut listen) = a.listen(0).unwrap();
    let entries = MeshListenHandle::parse(&handle).unwrap().core;
    assert_eq!(entries.entries()[0].addr, "::1".parse::<IpAddr>().unwrap());
    let (mut send, mut recv) = connect_pair(&a, &b, &handle, &mut listen);
    assert!(
        send.rails()[0].starts_with("rail 0: ::1 over sockets from ::1/128"),
        "{:?}",
        send.rails()
    );
    let msgs: Vec<(usize, u32)> = SIZES[..7].iter().map(|&n| (n, 1)).collect();
    exchange(&b, &a, &mut send, &mut recv, &msgs, 1, |n| n + 1);
    b.close_send(send).unwrap();
    a.close_recv(recv).unwrap();
}

/// Two subnets on loopback (127.0.0.0/24 and 127.0.1.0/24) are two NIC pairs: the
/// connection takes both as rails, each from its own local address, and every message
/// is cut over them and put back in order, smaller than its buffer or not.
#[test]
fn two_rails_striped_and_reassembled() {
    let a = socket_mesh(&[("lo", "127.0.0.1", 24), ("lo1", "127.0.1.1", 24)]);
    let b = socket_mesh(&[("lo", "127.0.0.2", 24), ("lo1", "127.0.1.2", 24)]);
    let (handle, mut listen) = a.listen(0).unwrap();
    let (mut send, mut recv) = connect_pair(&a, &b, &handle, &mut listen);
    let rails = send.rails().to_vec();
    assert_eq!(rails.len(), 2, "{rails:?}");
    assert!(
        rails[0].starts_with("rail 0: 127.0.0.1 over sockets from 127.0.0.2/24"),
        "{rails:?}"
    );
    assert!(
        rails[1].starts_with("rail 1: 127.0.1.1 over sockets from 127.0.1.2/24"),
        "{rails:?}"
    );
    // The listener saw each rail arrive from the address it was sent from.
    let from = recv.rails().to_vec();
    assert!(
        from[0].starts_with("127.0.0.2:") && from[1].starts_with("127.0.1.2:"),
        "{from:?}"
    );
    let msgs: Vec<(usize, u32)> = SIZES.iter().map(|&n| (n, 3)).collect();
    exchange(&b, &a, &mut send, &mut recv, &msgs, 1, |n| n);
    // Buffers larger than the messages: the parts are moved into place.
    exchange(&b, &a, &mut send, &mut recv, &msgs, 1, |n| n * 3 + 77);
    let grouped: Vec<(usize, u32)> = (0..5).map(|k| (SIZES[k + 4], 50 + k as u32)).collect();
    exchange(&b, &a, &mut send, &mut recv, &grouped, 5, |n| n + (1 << 20));
    b.close_send(send).unwrap();
    a.close_recv(recv).unwrap();
    // WEFT_MESH_RAILS=1 keeps one rail.
    let mut one = socket_mesh(&[("lo", "127.0.0.2", 24), ("lo1", "127.0.1.2", 24)]);
    one.config.max_rails = 1;
    let (send, recv) = connect_pair(&a, &one, &handle, &mut listen);
    assert_eq!((send.rails().len(), recv.rails().len()), (1, 1));
    a.close_listen(listen).unwrap();
}

/// Keeps the warnings logged in this test binary.
struct Capture(std::sync::Mutex<Vec<String>>);

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            let mut v = self.0.lock().unwrap_or_else(|p| p.into_inner());
            v.push(r.args().to_string());
        }
    }
    fn flush(&self) {}
}

static CAPTURE: Capture = Capture(std::sync::Mutex::new(Vec::new()));

fn warnings() -> Vec<String> {
    let _ = log::set_logger(&CAPTURE);
    log::set_max_level(log::LevelFilter::Warn);
    CAPTURE.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// A connector with a handle whose nonce is not the listen's (a stale handle) is refused
/// within the deadline, the listener says so naming it, and goes on serving the real one.
#[test]
fn a_stale_nonce_is_refused_and_the_listener_goes_on() {
    warnings();
    let a = socket_mesh(&[("lo", "127.0.0.1", 8)]);
    let b = socket_mesh(&[("lo", "127.0.0.1", 8)]);
    let (handle, mut listen) = a.listen(0).unwrap();
    let parsed = MeshListenHandle::parse(&handle).unwrap();
    assert_ne!(parsed.nonce, 0);
    let (other, _l2) = a.listen(0).unwrap();
    assert_ne!(MeshListenHandle::parse(&other).unwrap().nonce, parsed.nonce);
    let mut stale = handle;
    stale.0[127] ^= 0x5a;
    let started = Instant::now();
    let mut state = None;
    let err = loop {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "a stale connector hung"
        );
        assert!(
            a.accept(&mut listen).unwrap().is_none(),
            "a stale connector was accepted"
        );
        match b.connect(0, &stale, &mut state) {
            Ok(None) => std::thread::sleep(Duration::from_millis(1)),
            Ok(Some(_)) => panic!("a connect with a stale nonce succeeded"),
            Err(e) => break e,
        }
    };
    let text = err.to_string();
    assert!(
        text.contains("closed") && text.contains("127.0.0.1"),
        "{text}"
    );
    assert!(text.contains("nonce"), "{text}");
    let me = format!("to {}", listen.socket.as_ref().unwrap().handle().addr);
    let said = warnings();
    assert!(
        said.iter()
            .any(|w| w.contains("dropping a connection from 127.0.0.1:")
                && w.contains(&me)
                && w.contains("does not match this listener")),
        "{said:?}"
    );
    let (send, recv) = connect_pair(&a, &b, &handle, &mut listen);
    b.close_send(send).unwrap();
    a.close_recv(recv).unwrap();
}

/// A send that rail 0 takes and rail 1 cannot take yet (its 32 slots are busy) stays
/// half-posted: another call is refused with what was posted, the retry of the same call
/// posts the rest once rail 1 has room, and the message arrives whole.
#[test]
fn a_half_posted_send_is_finished_by_its_retry() {
    let a = socket_mesh(&[("lo", "127.0.0.1", 24), ("lo1", "127.0.1.1", 24)]);
    let b = socket_mesh(&[("lo", "127.0.0.2", 24), ("lo1", "127.0.1.2", 24)]);
    let (handle, mut listen) = a.listen(0).unwrap();
    let (mut send, mut recv) = connect_pair(&a, &b, &handle, &mut listen);
    assert_eq!(send.rails.len(), 2);
    let (tx, rx) = (b.backends(), a.backends());
    // Fill rail 1's request slots with empty messages of its own (tag 999).
    let empty = [0u8; 1];
    // SAFETY: `empty` outlives every request on it (all completed below).
    let rail_mr = unsafe {
        tx.reg_mr(
            CommRef::Send(&send.rails[1]),
            empty.as_ptr().cast_mut(),
            1,
            PtrKind::Host,
        )
    }
    .unwrap();
    let mut fillers = Vec::new();
    for _ in 0..crate::NET_MAX_REQUESTS {
        // SAFETY: as above.
        let r = unsafe { tx.isend(&mut send.rails[1], empty.as_ptr(), 0, 999, &rail_mr) };
        fillers.push(r.unwrap().expect("rail 1 has a free slot"));
    }
    let msg = pattern(300_001, 5);
    let mut buf = vec![0u8; msg.len()];
    // SAFETY: `msg` and `buf` outlive their registrations and requests.
    let smr = unsafe {
        b.reg_mr(
            CommRef::Send(&send),
            msg.as_ptr().cast_mut(),
            msg.len(),
            PtrKind::Host,
        )
    }
    .unwrap();
    // SAFETY: as above.
    let rmr = unsafe {
        a.reg_mr(
            CommRef::Recv(&recv),
            buf.as_mut_ptr(),
            buf.len(),
            PtrKind::Host,
        )
    }
    .unwrap();
    // SAFETY: as above.
    let first = unsafe { b.isend(&mut send, msg.as_ptr(), msg.len(), 4, &smr) }.unwrap();
    assert!(
        first.is_none(),
        "rail 1 has no free slot, yet the send was posted"
    );
    // SAFETY: as above.
    let other = unsafe { b.isend(&mut send, msg.as_ptr(), 10, 4, &smr) }.unwrap_err();
    assert!(
        other.to_string().contains("posted on some rails only"),
        "{other}"
    );
    // The receiver takes rail 1's fillers, which frees its slots.
    let mut zero = [0u8; 1];
    // SAFETY: `zero` outlives the receives on it.
    let zmr = unsafe {
        rx.reg_mr(
            CommRef::Recv(&recv.rails[1]),
            zero.as_mut_ptr(),
            1,
            PtrKind::Host,
        )
    }
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    for mut f in fillers {
        let bufs = [RecvBuffer {
            data: zero.as_mut_ptr(),
            size: 0,
            tag: 999,
            mr: &zmr,
        }];
        // SAFETY: as above.
        let mut r = unsafe { rx.irecv(&mut recv.rails[1], &bufs) }
            .unwrap()
            .expect("a free receive slot");
        let (mut sent, mut got) = (false, false);
        while !(sent && got) {
            assert!(Instant::now() < deadline, "the fillers did not complete");
            sent = sent || tx.test(&mut f).unwrap().is_some();
            got = got || rx.test(&mut r).unwrap().is_some();
        }
    }
    // The retry of the same call posts rail 1's part; the message arrives whole.
    let mut sreq = loop {
        assert!(Instant::now() < deadline, "the retry was never posted");
        // SAFETY: as above.
        if let Some(r) = unsafe { b.isend(&mut send, msg.as_ptr(), msg.len(), 4, &smr) }.unwrap() {
            break r;
        }
    };
    let bufs = [RecvBuffer {
        data: buf.as_mut_ptr(),
        size: buf.len(),
        tag: 4,
        mr: &rmr,
    }];
    // SAFETY: as above.
    let mut rreq = unsafe { a.irecv(&mut recv, &bufs) }
        .unwrap()
        .expect("posted");
    let (mut sent, mut got) = (None, None);
    while sent.is_none() || got.is_none() {
        assert!(Instant::now() < deadline, "the retried send did not arrive");
        if sent.is_none() {
            sent = b.test(&mut sreq).unwrap();
        }
        if got.is_none() {
            got = a.test(&mut rreq).unwrap();
        }
    }
    assert_eq!(got.unwrap().sizes(), [msg.len()]);
    assert!(buf == msg, "the retried message differs");
    // Nothing was posted twice: the next message matches on both rails.
    exchange(&b, &a, &mut send, &mut recv, &[(196_611, 8)], 1, |n| n);
    tx.dereg_mr(rail_mr).unwrap();
    rx.dereg_mr(zmr).unwrap();
    b.dereg_mr(smr).unwrap();
    a.dereg_mr(rmr).unwrap();
    b.close_send(send).unwrap();
    a.close_recv(recv).unwrap();
}

/// A failure on one rail closes the rail still carrying the rest of the message before the
/// error is returned. The receiver posts only on rail 0, a buffer of 1 000 bytes: the send's
/// part on rail 0 (73 728 of 140 000 bytes) fails, its part on rail 1 can never complete
/// (nothing was posted there), and once the send's error is out rail 1 is closed.
#[test]
fn a_failed_rail_closes_the_others_before_the_error_returns() {
    let a = socket_mesh(&[("lo", "127.0.0.1", 24), ("lo1", "127.0.1.1", 24)]);
    let b = socket_mesh(&[("lo", "127.0.0.2", 24), ("lo1", "127.0.1.2", 24)]);
    let (handle, mut listen) = a.listen(0).unwrap();
    let (mut send, mut recv) = connect_pair(&a, &b, &handle, &mut listen);
    assert_eq!((send.rails.len(), recv.rails.len()), (2, 2));
    let (tx, rx) = (b.backends(), a.backends());
    let msg = pattern(140_000, 9);
    let mut small = vec![0u8; 1000];
    // SAFETY: `msg` and `small` outlive their registrations and requests.
    let smr = unsafe {
        b.reg_mr(
            CommRef::Send(&send),
            msg.as_ptr().cast_mut(),
            msg.len(),
            PtrKind::Host,
        )
    }
    .unwrap();
    // SAFETY: as above.
    let rmr = unsafe {
        rx.reg_mr(
            CommRef::Recv(&recv.rails[0]),
            small.as_mut_ptr(),
            1000,
            PtrKind::Host,
        )
    }
    .unwrap();
    let bufs = [RecvBuffer {
        data: small.as_mut_ptr(),
        size: 1000,
        tag: 1,
        mr: &rmr,
    }];
    // SAFETY: as above.
    let mut rreq = unsafe { rx.irecv(&mut recv.rails[0], &bufs) }
        .unwrap()
        .expect("posted");
    // SAFETY: as above.
    let mut sreq = unsafe { b.isend(&mut send, msg.as_ptr(), msg.len(), 1, &smr) }
        .unwrap()
        .expect("posted");
    let deadline = Instant::now() + Duration::from_secs(20);
    let err = loop {
        assert!(
            Instant::now() < deadline,
            "the overflow never failed the send"
        );
        let _ = rx.test(&mut rreq);
        match b.test(&mut sreq) {
            Ok(None) => {}
            Ok(Some(c)) => panic!("the send completed: {:?}", c.sizes()),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(err.kind(), crate::NetErrorKind::Truncated { .. }),
        "{err}"
    );
    // Rail 1 is closed: posting on it is refused.
    // SAFETY: as above (nothing is posted).
    let e = unsafe { tx.isend(&mut send.rails[1], msg.as_ptr(), 1, 2, &smr.rails[1]) }.unwrap_err();
    assert!(e.to_string().contains("closed"), "{e}");
    rx.dereg_mr(rmr).unwrap();
    b.dereg_mr(smr).unwrap();
    let _ = b.close_send(send);
    let _ = a.close_recv(recv);
}

#[test]
fn the_bootstrap_interface_is_held_back_unless_the_mesh_names_its_nics() {
    let nics = |names: &[&str]| -> Vec<MeshNic> {
        names
            .iter()
            .enumerate()
            .map(|(i, name)| MeshNic {
                name: name.to_string(),
                index: i as u8,
                addr: format!("10.0.{i}.1").parse().unwrap(),
                prefix_len: 24,
                speed_mbps: 0,
                port: None,
                reserve: false,
            })
            .collect()
    };
    let reserved = |n: &[MeshNic]| -> Vec<String> {
        n.iter()
            .filter(|n| n.reserve)
            .map(|n| n.name.clone())
            .collect()
    };
    let unset = mesh_config(&[]).unwrap();
    let mut n = nics(&["eth0", "eth1", "mgmt0"]);
    mark_reserve(&mut n, &unset, Some("mgmt"));
    assert_eq!(reserved(&n), ["mgmt0"]);
    // NCCL_SOCKET_IFNAME unset: the bootstrap's pick is not known to be a management
    // network; nothing is held back.
    let mut n = nics(&["eth0", "eth1", "mgmt0"]);
    mark_reserve(&mut n, &unset, None);
    assert!(reserved(&n).is_empty());
    // WEFT_MESH_IFNAME chose the data NICs itself.
    let named = mesh_config(&[("WEFT_MESH_IFNAME", "eth,mgmt")]).unwrap();
    let mut n = nics(&["eth0", "eth1", "mgmt0"]);
    mark_reserve(&mut n, &named, Some("mgmt"));
    assert!(reserved(&n).is_empty());
    // Every NIC is the bootstrap's: none is held back.
    let mut n = nics(&["eth0", "eth1"]);
    mark_reserve(&mut n, &unset, Some("eth"));
    assert!(reserved(&n).is_empty());
}
