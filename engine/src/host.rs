//! This machine and this boot of it: what an owner row records and what tool
//! process identities carry (protocol §4.11, §4.13). A host name is not an identity
//! (cloned machines and containers share one); a boot id is unique to one running
//! kernel, within which a lock file or a process id means something.

use std::sync::OnceLock;

/// This machine's host name.
pub fn hostname() -> String {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        let mut buf = [0u8; 256];
        // SAFETY: `buf` is valid for `buf.len()` bytes; gethostname NUL-terminates
        // within that length on success.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
        if rc == 0 {
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            String::from_utf8_lossy(&buf[..end]).into_owned()
        } else {
            "localhost".into()
        }
    })
    .clone()
}

/// This boot of this machine (`/proc/sys/kernel/random/boot_id`); empty where it
/// cannot be read, which proves nothing.
pub fn boot_id() -> String {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| read_id("/proc/sys/kernel/random/boot_id"))
        .clone()
}

/// This machine (`/etc/machine-id`, or D-Bus's copy); empty where there is none.
pub fn machine_id() -> String {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let id = read_id("/etc/machine-id");
        if id.is_empty() {
            read_id("/var/lib/dbus/machine-id")
        } else {
            id
        }
    })
    .clone()
}

fn read_id(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}
