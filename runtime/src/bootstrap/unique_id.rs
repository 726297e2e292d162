//! The unique id: where the root listens and the secret every connection must prove.
//! 128 bytes like `ncclUniqueId`; a hex form travels through environment variables.

use std::fmt;
use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpListener};

use weft_core::wire::ParseError;
use weft_core::wire::bootstrap::{SECRET_LEN, UNIQUE_ID_LEN, UniqueIdRepr, UniqueIdView};

use super::interface::{interface_addrs, pick_address};
use super::root::BootstrapRoot;
use super::{BootstrapError, BootstrapOptions};

/// Identifies one bootstrap: the root's address and a random secret. Pass it to every rank
/// (as bytes or [`UniqueId::to_hex`]) and to nobody else: whoever holds it can join.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueId {
    repr: UniqueIdRepr,
}

impl fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The secret never reaches a log.
        write!(
            f,
            "UniqueId {{ root: {}, secret: <hidden> }}",
            self.repr.root
        )
    }
}

impl UniqueId {
    /// Starts a root rendezvous in this process (a background thread, like
    /// `ncclGetUniqueId`) and returns its id. The root ends once all ranks have checked in,
    /// or gives up (and tells the ranks that came which ones did not) `opts.timeout` after
    /// the first rank checked in. Use [`BootstrapRoot::start`] to wait for its outcome.
    pub fn new(opts: &BootstrapOptions) -> Result<UniqueId, BootstrapError> {
        let (id, _root) = BootstrapRoot::start(opts)?;
        Ok(id)
    }

    /// An id for a root started elsewhere, or with a chosen secret.
    pub fn from_parts(root: SocketAddr, secret: [u8; SECRET_LEN]) -> UniqueId {
        UniqueId {
            repr: UniqueIdRepr { root, secret },
        }
    }

    /// Where the root listens.
    pub fn root_addr(&self) -> SocketAddr {
        self.repr.root
    }

    pub(crate) fn secret(&self) -> [u8; SECRET_LEN] {
        self.repr.secret
    }

    /// The 128-byte wire form.
    pub fn to_bytes(&self) -> [u8; UNIQUE_ID_LEN] {
        self.repr.to_bytes()
    }

    /// Parses the 128-byte wire form.
    pub fn from_bytes(bytes: &[u8]) -> Result<UniqueId, ParseError> {
        let view = UniqueIdView::new_checked(bytes)?;
        Ok(UniqueId {
            repr: UniqueIdRepr::parse(&view),
        })
    }

    /// 256 lower-case hex digits, for an environment variable or a command line.
    pub fn to_hex(&self) -> String {
        self.to_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses [`UniqueId::to_hex`]'s output (either case; surrounding whitespace ignored).
    pub fn from_hex(text: &str) -> Result<UniqueId, BootstrapError> {
        let text = text.trim();
        let bad = |why: String| {
            BootstrapError::InvalidArgument(format!(
                "unique id: {why}; expected the {} hex digits printed by UniqueId::to_hex",
                UNIQUE_ID_LEN * 2
            ))
        };
        if text.len() != UNIQUE_ID_LEN * 2 {
            return Err(bad(format!("{} characters", text.len())));
        }
        let mut bytes = [0u8; UNIQUE_ID_LEN];
        for (i, pair) in text.as_bytes().chunks(2).enumerate() {
            let pair = std::str::from_utf8(pair).map_err(|_| bad("not ASCII".into()))?;
            let byte = u8::from_str_radix(pair, 16)
                .map_err(|_| bad(format!("{pair:?} at offset {} is not hex", i * 2)))?;
            if let Some(slot) = bytes.get_mut(i) {
                *slot = byte;
            }
        }
        UniqueId::from_bytes(&bytes).map_err(|e| bad(e.to_string()))
    }
}

/// 16 random bytes from the kernel.
pub(crate) fn random_secret() -> Result<[u8; SECRET_LEN], BootstrapError> {
    let mut secret = [0u8; SECRET_LEN];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut secret))
        .map_err(|source| BootstrapError::Local {
            what: "reading a random secret from /dev/urandom".into(),
            source,
        })?;
    Ok(secret)
}

/// The IP the root listens on: `opts.root_ip`, else the interface filter, else the defaults.
pub(crate) fn root_ip(opts: &BootstrapOptions) -> Result<IpAddr, BootstrapError> {
    if let Some(ip) = opts.root_ip {
        return Ok(ip);
    }
    let addrs = interface_addrs().map_err(|source| BootstrapError::Local {
        what: "listing network interfaces (getifaddrs)".into(),
        source,
    })?;
    pick_address(opts.interface.as_deref(), &addrs)
        .map(|a| {
            log::info!("bootstrap: root listens on {} ({})", a.ip, a.name);
            a.ip
        })
        .ok_or_else(|| {
            let names: Vec<&str> = addrs.iter().map(|a| a.name.as_str()).collect();
            BootstrapError::InvalidArgument(format!(
                "no interface matches WEFT_SOCKET_IFNAME/NCCL_SOCKET_IFNAME={:?}; interfaces that are up: {names:?}",
                opts.interface.as_deref().unwrap_or("")
            ))
        })
}

impl BootstrapRoot {
    /// Starts a root rendezvous in a background thread; returns its id and a handle whose
    /// [`BootstrapRoot::wait`] reports whether every rank checked in.
    pub fn start(opts: &BootstrapOptions) -> Result<(UniqueId, BootstrapRoot), BootstrapError> {
        let ip = root_ip(opts)?;
        let listener =
            TcpListener::bind((ip, opts.root_port)).map_err(|source| BootstrapError::Local {
                what: format!("binding the bootstrap root to {ip} port {}", opts.root_port),
                source,
            })?;
        let secret = random_secret()?;
        let root = BootstrapRoot::spawn(listener, secret, opts)?;
        Ok((UniqueId::from_parts(root.addr(), secret), root))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_errors() {
        let id = UniqueId::from_parts("[fd00::7]:1234".parse().unwrap(), *b"0123456789abcdef");
        let hex = id.to_hex();
        assert_eq!(hex.len(), 256);
        assert_eq!(UniqueId::from_hex(&hex).unwrap(), id);
        assert_eq!(UniqueId::from_hex(&hex.to_uppercase()).unwrap(), id);
        assert_eq!(UniqueId::from_bytes(&id.to_bytes()).unwrap(), id);
        assert!(UniqueId::from_hex(&hex[2..]).is_err());
        let mut bad = hex.clone();
        bad.replace_range(10..12, "zz");
        assert!(
            UniqueId::from_hex(&bad)
                .unwrap_err()
                .to_string()
                .contains("offset 10")
        );
        assert!(!format!("{id:?}").contains("0123"));
    }

    #[test]
    fn secrets_differ() {
        assert_ne!(random_secret().unwrap(), random_secret().unwrap());
    }
}
