//! What a stuck PHP thread is blocked in, read from /proc, and how to make that call
//! return without touching anything else of the process.
//!
//! PHP's timer signal sets the thread's timed-out flag and interrupts the call, but most
//! blocking calls retry on EINTR (curl's poll loop, PHP's stream reads, `waitpid` in
//! `system()`), so the thread stays where it is. What does end them:
//! - a socket the call waits on, shut down (`shutdown(2)`; a connect in progress is
//!   dissolved with `connect(AF_UNSPEC)`): the call returns with the connection closed;
//! - a pipe the call reads, whose writers (child processes of this server) are killed;
//! - a child process the call waits for (`wait4`, `waitid`), killed.
//!
//! The file descriptors come from the call's arguments: directly (read, recv, connect),
//! from the `pollfd` array or `fd_set`s in the thread's memory (read with
//! `process_vm_readv`, which fails instead of faulting), or from an epoll instance's
//! fdinfo. Before acting, the call and each descriptor's identity are read again: a
//! thread that moved on in between is left alone.

use std::fs;

/// The system call a thread is blocked in, with what it waits on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    /// The call's name, or its number.
    pub call: String,
    raw: String,
    fds: Vec<i32>,
    child: Option<libc::pid_t>,
}

impl Blocked {
    /// The descriptors the call waits on, with what they are ("socket:[123]").
    pub fn describe_fds(&self) -> Vec<String> {
        self.fds.iter().map(|&fd| format!("{fd}={}", fd_identity(fd).unwrap_or_default())).collect()
    }
}

fn syscall_line(tid: libc::pid_t) -> Option<String> {
    fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).ok().map(|s| s.trim().to_owned())
}

fn fd_identity(fd: i32) -> Option<String> {
    fs::read_link(format!("/proc/self/fd/{fd}")).ok().map(|p| p.to_string_lossy().into_owned())
}

/// Copies `len` bytes at `addr` of this process, or None where nothing is mapped.
fn read_memory(addr: u64, len: usize) -> Option<Vec<u8>> {
    if addr == 0 || len == 0 || len > 1 << 20 {
        return None;
    }
    let mut buf = vec![0u8; len];
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: len };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: len };
    // SAFETY: the local buffer is ours and `len` long; the kernel checks the remote range.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    (n == len as isize).then_some(buf)
}

fn pollfds(addr: u64, n: u64) -> Vec<i32> {
    let size = std::mem::size_of::<libc::pollfd>();
    let Some(bytes) = read_memory(addr, (n.min(1024) as usize) * size) else { return Vec::new() };
    bytes.chunks_exact(size).map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]])).filter(|&fd| fd >= 0).collect()
}

fn fd_set(addr: u64, nfds: u64) -> Vec<i32> {
    let nfds = nfds.min(libc::FD_SETSIZE as u64) as usize;
    let Some(bytes) = read_memory(addr, nfds.div_ceil(8)) else { return Vec::new() };
    (0..nfds).filter(|&fd| bytes[fd / 8] & (1 << (fd % 8)) != 0).map(|fd| fd as i32).collect()
}

fn epoll_fds(epfd: u64) -> Vec<i32> {
    let Ok(info) = fs::read_to_string(format!("/proc/self/fdinfo/{epfd}")) else { return Vec::new() };
    info.lines().filter_map(|l| l.strip_prefix("tfd:")?.split_whitespace().next()?.parse().ok()).collect()
}

fn call_name(nr: i64) -> String {
    #[cfg(target_arch = "x86_64")]
    let old: &[(i64, &str)] =
        &[(libc::SYS_poll, "poll"), (libc::SYS_select, "select"), (libc::SYS_epoll_wait, "epoll_wait")];
    #[cfg(not(target_arch = "x86_64"))]
    let old: &[(i64, &str)] = &[];
    let known: &[(i64, &str)] = &[
        (libc::SYS_read, "read"),
        (libc::SYS_readv, "readv"),
        (libc::SYS_recvfrom, "recvfrom"),
        (libc::SYS_recvmsg, "recvmsg"),
        (libc::SYS_write, "write"),
        (libc::SYS_sendto, "sendto"),
        (libc::SYS_connect, "connect"),
        (libc::SYS_accept4, "accept4"),
        (libc::SYS_ppoll, "ppoll"),
        (libc::SYS_pselect6, "pselect6"),
        (libc::SYS_epoll_pwait, "epoll_pwait"),
        (libc::SYS_wait4, "wait4"),
        (libc::SYS_waitid, "waitid"),
        (libc::SYS_nanosleep, "nanosleep"),
        (libc::SYS_clock_nanosleep, "clock_nanosleep"),
        (libc::SYS_futex, "futex"),
        (libc::SYS_flock, "flock"),
        (libc::SYS_fcntl, "fcntl"),
    ];
    known.iter().chain(old).find(|(n, _)| *n == nr).map_or_else(|| format!("syscall {nr}"), |(_, name)| (*name).to_owned())
}

/// What the thread `tid` (of this process) is blocked in; None when it is not in a
/// system call (running, or gone).
pub fn inspect(tid: libc::pid_t) -> Option<Blocked> {
    let raw = syscall_line(tid)?;
    let mut words = raw.split_whitespace();
    let nr: i64 = words.next()?.parse().ok()?;
    if nr < 0 {
        return None;
    }
    let args: Vec<u64> = words.take(6).filter_map(|w| u64::from_str_radix(w.trim_start_matches("0x"), 16).ok()).collect();
    if args.len() < 6 {
        return None;
    }
    let (mut fds, mut child) = (Vec::new(), None);
    match nr {
        libc::SYS_read | libc::SYS_readv | libc::SYS_recvfrom | libc::SYS_recvmsg | libc::SYS_write | libc::SYS_sendto
        | libc::SYS_connect | libc::SYS_accept4 => fds.push(args[0] as i32),
        libc::SYS_ppoll => fds = pollfds(args[0], args[1]),
        libc::SYS_pselect6 => {
            for set in &args[1..4] {
                fds.extend(fd_set(*set, args[0]));
            }
        }
        libc::SYS_epoll_pwait => fds = epoll_fds(args[0]),
        libc::SYS_wait4 => child = Some(args[0] as i32).filter(|&p| p > 0),
        libc::SYS_waitid if args[0] == libc::P_PID as u64 => child = Some(args[1] as i32).filter(|&p| p > 0),
        _ => {}
    }
    #[cfg(target_arch = "x86_64")]
    match nr {
        libc::SYS_poll => fds = pollfds(args[0], args[1]),
        libc::SYS_select => {
            for set in &args[1..4] {
                fds.extend(fd_set(*set, args[0]));
            }
        }
        libc::SYS_epoll_wait => fds = epoll_fds(args[0]),
        _ => {}
    }
    fds.sort_unstable();
    fds.dedup();
    Some(Blocked { call: call_name(nr), raw, fds, child })
}

/// What the thread `tid` is blocked in, looked at a few times over about 10 ms: a
/// thread that a signal just interrupted runs for a moment before it retries its call,
/// and one look would find it in no call at all. None when it stays out of any.
pub fn inspect_settled(tid: libc::pid_t) -> Option<Blocked> {
    for _ in 0..10 {
        if let Some(blocked) = inspect(tid) {
            return Some(blocked);
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    None
}

/// Our descendants: child processes of this server, their children, ...
fn descendants() -> Vec<libc::pid_t> {
    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() };
    let mut parents = Vec::new();
    if let Ok(dir) = fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<libc::pid_t>().ok()) else { continue };
            let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
            // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            let Some(ppid): Option<libc::pid_t> = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok()) else {
                continue;
            };
            parents.push((pid, ppid));
        }
    }
    let mut found = vec![me];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(parents.iter().filter(|(_, pp)| *pp == parent).map(|(p, _)| *p));
        i += 1;
    }
    found.remove(0);
    found
}

/// Descendants that hold `identity` (such as "pipe:[123]") open.
fn holders(identity: &str) -> Vec<libc::pid_t> {
    descendants()
        .into_iter()
        .filter(|pid| {
            fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
                fds.flatten().any(|fd| fs::read_link(fd.path()).is_ok_and(|t| t.to_string_lossy() == identity))
            })
        })
        .collect()
}

/// Ends what `blocked` (read by [`inspect`] for the thread `tid`) waits on. Returns
/// what was done, for the log.
pub fn release(tid: libc::pid_t, blocked: &Blocked) -> Vec<String> {
    let identities: Vec<(i32, Option<String>)> = blocked.fds.iter().map(|&fd| (fd, fd_identity(fd))).collect();
    // The thread must still be in the very same call: else the descriptors may be
    // another request's by now.
    if syscall_line(tid).as_deref() != Some(blocked.raw.as_str()) {
        return Vec::new();
    }
    let mut done = Vec::new();
    for (fd, identity) in identities {
        let Some(identity) = identity else { continue };
        if fd_identity(fd).as_deref() != Some(identity.as_str()) {
            continue;
        }
        if identity.starts_with("socket:") {
            // SAFETY: plain calls on a descriptor that is a socket of the blocked call.
            let shut = unsafe { libc::shutdown(fd, libc::SHUT_RDWR) } == 0;
            if shut {
                done.push(format!("shut down {identity}"));
            } else {
                // A connect in progress: dissolve it.
                let unspec = libc::sockaddr { sa_family: libc::AF_UNSPEC as libc::sa_family_t, sa_data: [0; 14] };
                // SAFETY: as above; the address is a valid sockaddr of its size.
                if unsafe { libc::connect(fd, &unspec, std::mem::size_of::<libc::sockaddr>() as libc::socklen_t) } == 0 {
                    done.push(format!("disconnected {identity}"));
                }
            }
        } else if identity.starts_with("pipe:") {
            for pid in holders(&identity) {
                // SAFETY: a child process of this server.
                if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
                    done.push(format!("killed process {pid} holding {identity}"));
                }
            }
        }
    }
    if let Some(pid) = blocked.child
        && descendants().contains(&pid)
    {
        // SAFETY: a child process of this server that the thread waits for.
        if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
            done.push(format!("killed child process {pid}"));
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::time::{Duration, Instant};

    fn gettid() -> libc::pid_t {
        // SAFETY: no arguments.
        unsafe { libc::gettid() }
    }

    fn wait_blocked(tid: libc::pid_t) -> Blocked {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(b) = inspect(tid).filter(|b| !b.fds.is_empty() || b.child.is_some()) {
                return b;
            }
            assert!(Instant::now() < deadline, "the thread never blocked");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_read_on_a_silent_socket_is_released() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            tx.send((gettid(), s.as_raw_fd())).unwrap();
            let mut buf = [0u8; 16];
            s.read(&mut buf).map(|n| n == 0) // the server never writes
        });
        let _accepted = listener.accept().unwrap();
        let (tid, fd) = rx.recv().unwrap();
        let blocked = wait_blocked(tid);
        assert!(blocked.fds.contains(&fd), "{blocked:?}");
        let done = release(tid, &blocked);
        assert!(done.iter().any(|d| d.starts_with("shut down socket:")), "{done:?}");
        assert!(reader.join().unwrap().unwrap(), "the read returned: end of stream");
    }

    #[test]
    fn a_wait_for_a_child_is_released() {
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
            tx.send(gettid()).unwrap();
            child.wait().unwrap()
        });
        let tid = rx.recv().unwrap();
        let blocked = wait_blocked(tid);
        assert!(blocked.call.starts_with("wait"), "{blocked:?}");
        let done = release(tid, &blocked);
        assert!(done.iter().any(|d| d.starts_with("killed child process")), "{done:?}");
        let status = waiter.join().unwrap();
        assert!(!status.success());
    }

    #[test]
    fn a_thread_running_code_is_not_in_a_call() {
        use std::sync::atomic::{AtomicBool, Ordering};
        static STOP: AtomicBool = AtomicBool::new(false);
        let (tx, rx) = std::sync::mpsc::channel();
        let spinner = std::thread::spawn(move || {
            tx.send(gettid()).unwrap();
            while !STOP.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        let tid = rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let seen = (0..20).filter_map(|_| inspect(tid)).count();
        STOP.store(true, Ordering::Relaxed);
        spinner.join().unwrap();
        assert!(seen < 20, "a spinning thread is mostly not in a system call");
    }

    #[test]
    fn a_call_retried_after_a_moment_of_running_is_still_found() {
        // As a call PHP's timer interrupts: a moment of running code, then the call again.
        use std::sync::atomic::{AtomicBool, Ordering};
        static STOP: AtomicBool = AtomicBool::new(false);
        let (tx, rx) = std::sync::mpsc::channel();
        let retrier = std::thread::spawn(move || {
            tx.send(gettid()).unwrap();
            while !STOP.load(Ordering::Relaxed) {
                let until = Instant::now() + Duration::from_micros(300);
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
                std::thread::sleep(Duration::from_millis(4));
            }
        });
        let tid = rx.recv().unwrap();
        // Looks spread over many rounds of running and calling.
        let found = (0..100)
            .filter(|_| {
                std::thread::sleep(Duration::from_micros(700));
                inspect_settled(tid).is_some()
            })
            .count();
        STOP.store(true, Ordering::Relaxed);
        retrier.join().unwrap();
        assert_eq!(found, 100, "every look finds the call, even when it lands in the running moment");
    }
}
