//! The seccomp filters of every confined level: system calls that reach
//! other processes or kernel state Landlock does not govern (ptrace,
//! io_uring, bpf, mounts, namespaces, keyrings, …), non-UNIX sockets without
//! network, `clone3` (answered ENOSYS), and every x32 system call.
//!
//! Not here: filesystem access ([`super::landlock`]).

use std::os::fd::RawFd;

use super::confine::Failure;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, sock_filter,
};

/// The seccomp program of a level: `EPERM` for the listed syscalls, for
/// `socket` with a family other than AF_UNIX (unless `network`), for `clone`
/// with a namespace flag, for set-id modes and inode-flag `ioctl`s, and for
/// every x32 call; `ENOSYS` for [`ENOSYS_CALLS`]; with `notify`, then
/// [`super::metadata::notify_program`]'s decision for everything the rules
/// allow. See [`with_front`].
fn seccomp_program(network: bool, notify: bool) -> Result<BpfProgram, String> {
    let (chain, ruled) = chain_program(network)?;
    let tail = notify.then(|| Tail {
        program: super::metadata::notify_program(),
        calls: super::metadata::notified_calls(),
    });
    with_front(chain, &ruled, tail)
}

/// A program run after the front and the chain allowed a call, and the
/// only calls it does not simply allow (see [`with_front`]).
struct Tail {
    program: BpfProgram,
    calls: Vec<i64>,
}

/// seccompiler's chain of the rules, and the call numbers that have one.
fn chain_program(network: bool) -> Result<(BpfProgram, Vec<i64>), String> {
    let err = |e: seccompiler::BackendError| format!("seccomp: {e}");
    let denied: &[i64] = &[
        // Debugging other processes, reading/writing their memory.
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_pidfd_getfd,
        // io_uring runs operations outside the syscall filter.
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        // Kernel attack surface and kernel state.
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_acct,
        libc::SYS_syslog,
        #[cfg(target_arch = "x86_64")]
        libc::SYS_iopl,
        #[cfg(target_arch = "x86_64")]
        libc::SYS_ioperm,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        // Handle-based opens skip path checks' intent.
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        // Mounts and namespaces: a new view of the filesystem.
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        SYS_OPEN_TREE_ATTR,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_unshare,
        libc::SYS_setns,
        // Kernel keyrings hold other users' and the server's secrets.
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
    ];
    let mut rules: std::collections::BTreeMap<i64, Vec<SeccompRule>> =
        denied.iter().map(|s| (*s, Vec::new())).collect();
    if !network {
        rules.insert(
            libc::SYS_socket,
            vec![
                SeccompRule::new(vec![
                    SeccompCondition::new(
                        0,
                        SeccompCmpArgLen::Dword,
                        SeccompCmpOp::Ne,
                        libc::AF_UNIX as u64,
                    )
                    .map_err(err)?,
                ])
                .map_err(err)?,
            ],
        );
    }
    let ns_flags = [
        libc::CLONE_NEWNS,
        libc::CLONE_NEWCGROUP,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
    ];
    let mut clone_rules = Vec::new();
    for flag in ns_flags {
        let flag = flag as u64;
        clone_rules.push(
            SeccompRule::new(vec![
                SeccompCondition::new(
                    0,
                    SeccompCmpArgLen::Qword,
                    SeccompCmpOp::MaskedEq(flag),
                    flag,
                )
                .map_err(err)?,
            ])
            .map_err(err)?,
        );
    }
    rules.insert(libc::SYS_clone, clone_rules);
    // Set-id bits, everywhere (see [`super::metadata`]): a root-owned
    // setuid file in the workspace would be a root shell for every local
    // user. Each rule: the mode argument has S_ISUID, or has S_ISGID.
    let set_id = |mode_arg: u8, extra: Option<(u8, u64)>| -> Result<Vec<SeccompRule>, String> {
        let mut out = Vec::new();
        for bit in [libc::S_ISUID, libc::S_ISGID] {
            let bit = u64::from(bit);
            let mut conds = vec![
                SeccompCondition::new(
                    mode_arg,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::MaskedEq(bit),
                    bit,
                )
                .map_err(err)?,
            ];
            if let Some((arg, flag)) = extra {
                conds.push(
                    SeccompCondition::new(
                        arg,
                        SeccompCmpArgLen::Dword,
                        SeccompCmpOp::MaskedEq(flag),
                        flag,
                    )
                    .map_err(err)?,
                );
            }
            out.push(SeccompRule::new(conds).map_err(err)?);
        }
        Ok(out)
    };
    const O_TMPFILE_BIT: u64 = 0x40_0000; // __O_TMPFILE
    // The forms without `at` exist on x86_64 only (aarch64 has the `*at`
    // forms, which its libc uses for every call).
    for (nr, mode_arg, flags_arg) in [
        #[cfg(target_arch = "x86_64")]
        (libc::SYS_chmod, 1, None),
        (libc::SYS_fchmod, 1, None),
        (libc::SYS_fchmodat, 2, None),
        (super::metadata::SYS_FCHMODAT2, 2, None),
        #[cfg(target_arch = "x86_64")]
        (libc::SYS_creat, 1, None),
        #[cfg(target_arch = "x86_64")]
        (libc::SYS_mknod, 1, None),
        (libc::SYS_mknodat, 2, None),
        #[cfg(target_arch = "x86_64")]
        (libc::SYS_open, 2, Some(1)),
        (libc::SYS_openat, 3, Some(2)),
    ] {
        let mut r = Vec::new();
        match flags_arg {
            // The mode only counts when the call creates a file.
            Some(f) => {
                for flag in [libc::O_CREAT as u64, O_TMPFILE_BIT] {
                    r.extend(set_id(mode_arg, Some((f, flag)))?);
                }
            }
            None => r.extend(set_id(mode_arg, None)?),
        }
        rules.insert(nr, r);
    }
    // `chattr` (inode flags, project ids): no path check is possible on an
    // ioctl, and nothing a command needs.
    const FS_IOC_SETFLAGS: u64 = 0x4008_6602;
    const FS_IOC32_SETFLAGS: u64 = 0x4004_6602;
    const FS_IOC_FSSETXATTR: u64 = 0x401c_5820;
    let mut ioctl_rules = Vec::new();
    for cmd in [FS_IOC_SETFLAGS, FS_IOC32_SETFLAGS, FS_IOC_FSSETXATTR] {
        ioctl_rules.push(
            SeccompRule::new(vec![
                SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, cmd)
                    .map_err(err)?,
            ])
            .map_err(err)?,
        );
    }
    rules.insert(libc::SYS_ioctl, ioctl_rules);
    let ruled: Vec<i64> = rules.keys().copied().collect();
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e: seccompiler::BackendError| format!("seccomp: {e}"))?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(err)?;
    Ok((filter.try_into().map_err(err)?, ruled))
}

/// `open_tree_attr` (Linux 6.15): `open_tree` with mount attributes.
const SYS_OPEN_TREE_ATTR: i64 = 467;
/// `setxattrat` (Linux 6.13): the path-and-fd form of `setxattr`.
const SYS_SETXATTRAT: i64 = 463;
/// `removexattrat` (Linux 6.13).
const SYS_REMOVEXATTRAT: i64 = 466;
/// `file_setattr` (Linux 6.17): inode flags through a path.
const SYS_FILE_SETATTR: i64 = 469;

/// Refused with ENOSYS, so that libc falls back to a call the filter can
/// judge: `clone3` passes its flags in memory a filter cannot read (libc
/// falls back to `clone`, whose flags the program checks), `openat2` its
/// mode (found by a breaker: `openat2` with `O_TMPFILE` and mode 06755, then
/// `linkat`, left a set-id file in the workspace; `openat`'s mode the
/// program checks), and the newest metadata calls fall back to the ones
/// [`super::metadata`] traps.
const ENOSYS_CALLS: [i64; 5] = [
    libc::SYS_clone3,
    libc::SYS_openat2,
    SYS_SETXATTRAT,
    SYS_REMOVEXATTRAT,
    SYS_FILE_SETATTR,
];

/// x32 system calls reach the same kernel entry points under numbers with
/// this bit set and the x86_64 audit arch, so per-number rules would not
/// see them: every one is refused.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

// Classic BPF opcodes (`linux/bpf_common.h`) of the programs written here
// and in [`super::metadata`].
pub(super) const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
pub(super) const JMP_JA: u16 = 0x05; // BPF_JMP | BPF_JA
pub(super) const JMP_JEQ_K: u16 = 0x05 | 0x10;
pub(super) const JMP_JGE_K: u16 = 0x05 | 0x30;
pub(super) const JMP_JSET_K: u16 = 0x05 | 0x40;
pub(super) const RET_K: u16 = 0x06;
/// Offsets in `struct seccomp_data`: the call number, the architecture,
/// and the arguments (`args[i]` at `ARGS_OFFSET + 8 * i`, low 32 bits first
/// on both targets, which are little-endian).
pub(super) const NR_OFFSET: u32 = 0;
pub(super) const ARCH_OFFSET: u32 = 4;
pub(super) const ARGS_OFFSET: u32 = 16;
/// The kernel's longest classic BPF program (`BPF_MAXINSNS`): a longer one
/// fails here, when the programs are prepared, not at a command's install.
const MAX_INSTRUCTIONS: usize = 4096;
/// Most call numbers one leaf of the front's search compares one by one.
const LEAF_CALLS: usize = 4;

/// Where a call number listed in the front goes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Listed {
    /// Into seccompiler's chain, which holds its rules.
    Chain,
    /// Refused with ENOSYS ([`ENOSYS_CALLS`]).
    Enosys,
    /// Into the tail, which may notify the worker.
    Tail,
}

/// The whole seccomp program of a level: a front that decides every call
/// without a rule by a binary search over the call numbers, then
/// seccompiler's chain for the calls that have one (`chain`, compiled from
/// exactly the rules whose numbers are `ruled`).
///
/// **Why a front.** seccompiler compiles a linear chain, three instructions
/// per call number. At every install the kernel runs the program once per
/// system call number and architecture to cache the calls it always allows
/// (`seccomp_cache_prepare`), and a call without a rule walked the whole
/// chain. Through the front, a call without a rule is decided after about
/// seven comparisons, and one install replaces the four the x32, `clone3`,
/// main and metadata programs took (~0.5 ms of every command's start
/// before, most of it per install: BENCHMARKS.md, "Session 17").
///
/// **Why it decides exactly what the chain did.** The front allows only
/// numbers that have no rule in the chain, whose default action is to
/// allow; every ruled number, and every call of another architecture, is
/// passed to the chain unchanged. It adds the two programs installed
/// beside the chain before: x32 numbers refused with EPERM and
/// [`ENOSYS_CALLS`] with ENOSYS (none of which has a rule in the chain, so
/// no result the kernel would have had to choose between changes).
///
/// **The metadata filter as a tail.** With `tail` (the notifying program
/// of [`super::metadata`]), every "allow" of the chain, and of the front
/// for the calls the tail may notify, jumps to the tail instead, which then
/// decides between allowing and notifying the worker: the same as
/// installing the two as separate filters, where the kernel takes the
/// stricter result (an error or a kill of the chain is stricter than a
/// notification, which is stricter than allowing). One install instead of
/// two: each install JIT-compiles its program, and allocating the JIT
/// image is most of an install's cost (BENCHMARKS.md, "Session 17"). Every
/// other call the front allows at once: the tail would only compare it
/// with each of its calls in turn and allow it, ~35 instructions on every
/// system call of the command, and as many for each of the ~460 call
/// numbers the kernel runs the program over at its install to build its
/// cache of always-allowed calls (with interrupts off: BENCHMARKS.md,
/// "Session 19").
///
/// The unit test runs both forms over every call number and the ruled
/// arguments and compares.
fn with_front(chain: BpfProgram, ruled: &[i64], tail: Option<Tail>) -> Result<BpfProgram, String> {
    let mut listed: Vec<(u32, Listed)> = Vec::new();
    for nr in ruled {
        listed.push((call_number(*nr)?, Listed::Chain));
    }
    // A call both ruled and notified goes to the chain (kept by the dedup
    // below: Chain sorts first), whose "allow" leads to the tail.
    for nr in tail.iter().flat_map(|t| &t.calls) {
        listed.push((call_number(*nr)?, Listed::Tail));
    }
    for nr in ENOSYS_CALLS {
        if ruled.contains(&nr) {
            return Err(format!(
                "seccomp: call {nr} both ruled and refused with ENOSYS"
            ));
        }
        listed.push((call_number(nr)?, Listed::Enosys));
    }
    listed.sort_unstable();
    listed.dedup_by_key(|(nr, _)| *nr);

    let arch_check: usize = if cfg!(target_arch = "x86_64") { 1 } else { 0 };
    let head = 4 + arch_check; // ld arch, jeq arch, ja chain, ld nr, [jge x32]
    let tree = tree_len(listed.len());
    // The returns after the tree, then the jumps into the tail and the
    // chain.
    let allow = head + tree;
    let eperm = allow + 1;
    let enosys = eperm + 1;
    let to_tail = enosys + 1;
    let to_chain = to_tail + 1;
    let chain_start = to_chain + 1;
    let tail_start = chain_start + chain.len();

    let op = |code, k, jt, jf| sock_filter { code, jt, jf, k };
    let mut front: Vec<sock_filter> = Vec::with_capacity(chain_start);
    front.push(op(LD_W_ABS, ARCH_OFFSET, 0, 0));
    front.push(op(JMP_JEQ_K, super::metadata::AUDIT_ARCH, 1, 0));
    // Another architecture: the chain's own check decides (it kills).
    front.push(op(JMP_JA, offset(2, chain_start)?, 0, 0));
    front.push(op(LD_W_ABS, NR_OFFSET, 0, 0));
    #[cfg(target_arch = "x86_64")]
    front.push(op(
        JMP_JGE_K,
        X32_SYSCALL_BIT,
        short(front.len(), eperm)?,
        0,
    ));
    let targets = Targets {
        allow,
        chain: to_chain,
        enosys,
        tail: to_tail,
    };
    search(&mut front, &listed, &targets)?;
    debug_assert_eq!(front.len(), allow);
    front.push(op(RET_K, libc::SECCOMP_RET_ALLOW, 0, 0));
    front.push(op(
        RET_K,
        libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        0,
        0,
    ));
    front.push(op(
        RET_K,
        libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        0,
        0,
    ));
    // Without a tail, no call is listed for it: never reached.
    front.push(op(JMP_JA, offset(to_tail, tail_start)?, 0, 0));
    front.push(op(JMP_JA, offset(to_chain, chain_start)?, 0, 0));
    debug_assert_eq!(front.len(), chain_start);
    for ins in chain {
        let at = front.len();
        front.push(match &tail {
            Some(_) if ins.code == RET_K && ins.k == libc::SECCOMP_RET_ALLOW => {
                op(JMP_JA, offset(at, tail_start)?, 0, 0)
            }
            _ => ins,
        });
    }
    front.extend(tail.into_iter().flat_map(|t| t.program));
    if front.len() > MAX_INSTRUCTIONS {
        return Err(format!(
            "seccomp: a program of {} instructions, over the kernel's {MAX_INSTRUCTIONS}",
            front.len()
        ));
    }
    Ok(front)
}

/// Where the front's search jumps.
struct Targets {
    allow: usize,
    chain: usize,
    enosys: usize,
    tail: usize,
}

/// Instructions of the search over `n` listed numbers (see [`search`]).
fn tree_len(n: usize) -> usize {
    if n <= LEAF_CALLS {
        n + 1
    } else {
        let left = n / 2;
        1 + tree_len(left) + tree_len(n - left)
    }
}

/// Appends the search over `listed` (sorted): a node compares with the
/// first number of its right half (`jge`), a leaf compares each number
/// (`jeq`) and jumps to its target, then to "allow".
fn search(out: &mut Vec<sock_filter>, listed: &[(u32, Listed)], t: &Targets) -> Result<(), String> {
    let at = out.len();
    if listed.len() <= LEAF_CALLS {
        for (i, (nr, to)) in listed.iter().enumerate() {
            let target = match to {
                Listed::Chain => t.chain,
                Listed::Enosys => t.enosys,
                Listed::Tail => t.tail,
            };
            let jt = short(at + i, target)?;
            out.push(sock_filter {
                code: JMP_JEQ_K,
                jt,
                jf: 0,
                k: *nr,
            });
        }
        let here = out.len();
        out.push(sock_filter {
            code: JMP_JA,
            jt: 0,
            jf: 0,
            k: offset(here, t.allow)?,
        });
        return Ok(());
    }
    let (left, right) = listed.split_at(listed.len() / 2);
    let jt = short(at, at + 1 + tree_len(left.len()))?;
    out.push(sock_filter {
        code: JMP_JGE_K,
        jt,
        jf: 0,
        k: right[0].0,
    });
    search(out, left, t)?;
    search(out, right, t)
}

/// The offset of a jump at `from` to `to` (BPF jumps go forward only).
fn offset(from: usize, to: usize) -> Result<u32, String> {
    to.checked_sub(from + 1)
        .and_then(|d| u32::try_from(d).ok())
        .ok_or_else(|| format!("seccomp: no jump from {from} to {to}"))
}

/// The same for a conditional jump, whose offset is one byte.
fn short(from: usize, to: usize) -> Result<u8, String> {
    offset(from, to).and_then(|d| {
        u8::try_from(d).map_err(|_| format!("seccomp: jump from {from} to {to} too long"))
    })
}

fn call_number(nr: i64) -> Result<u32, String> {
    u32::try_from(nr).map_err(|_| format!("seccomp: call number {nr}"))
}

/// [`seccomp_program`] with the metadata filter, indexed by `network as
/// usize`: every confined command installs one of these.
type Programs = [BpfProgram; 2];

/// The programs, compiled once per process (the zygote compiles them before
/// it forks any worker): they depend only on the architecture and
/// `network`, never on the command.
static PROGRAMS: std::sync::OnceLock<Result<Programs, String>> = std::sync::OnceLock::new();

fn programs() -> Result<&'static Programs, String> {
    PROGRAMS
        .get_or_init(|| Ok([seccomp_program(false, true)?, seccomp_program(true, true)?]))
        .as_ref()
        .map_err(Clone::clone)
}

/// Compiles the programs now (see [`super::prepare`]).
pub(super) fn prepare() {
    let _ = programs();
}

/// The level's program with the metadata filter as its tail (every
/// confined command installs it: see [`super::metadata`]).
pub(super) fn program_with_notify(network: bool) -> Result<&'static BpfProgram, String> {
    Ok(&programs()?[usize::from(network)])
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, NEW_LISTENER, program)` after setting
/// `no_new_privs`: the listener's fd (close-on-exec, owned by the caller).
/// System calls only: the cloned command process runs it (see
/// [`super::confine`]).
pub(super) fn install_with_listener(program: &BpfProgram) -> Result<RawFd, Failure> {
    let prog = libc::sock_fprog {
        // At most MAX_INSTRUCTIONS (see `with_front`).
        len: program.len() as u16,
        // The same `struct sock_filter` (both `repr(C)`: u16, u8, u8, u32).
        filter: program.as_ptr().cast::<libc::sock_filter>().cast_mut(),
    };
    // SAFETY: plain calls on this process; the program outlives the call
    // (it is static) and the kernel copies it.
    let rc = unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(Failure::last("no_new_privs"));
        }
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &prog as *const libc::sock_fprog,
        )
    };
    if rc < 0 {
        return Err(Failure::last("seccomp"));
    }
    Ok(rc as RawFd)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `struct seccomp_data`: nr, arch, instruction pointer, six arguments.
    #[derive(Clone, Copy)]
    struct Data {
        nr: u32,
        arch: u32,
        args: [u64; 6],
    }

    impl Data {
        fn word(&self, offset: u32) -> u32 {
            match offset {
                0 => self.nr,
                4 => self.arch,
                8 | 12 => 0,
                o if (16..64).contains(&o) && o % 4 == 0 => {
                    let arg = self.args[(o as usize - 16) / 8];
                    if o % 8 == 0 {
                        arg as u32
                    } else {
                        (arg >> 32) as u32
                    }
                }
                o => panic!("load at {o}"),
            }
        }
    }

    /// Runs a classic BPF program of the instructions seccompiler and the
    /// front emit (loads of `seccomp_data`, `and`, conditional and plain
    /// jumps, returns), as the kernel would.
    fn run(prog: &[sock_filter], d: &Data) -> u32 {
        run_counted(prog, d).0
    }

    /// [`run`], and how many instructions ran.
    fn run_counted(prog: &[sock_filter], d: &Data) -> (u32, usize) {
        let (mut pc, mut acc) = (0usize, 0u32);
        let mut ran = 0;
        loop {
            let i = &prog[pc];
            pc += 1;
            ran += 1;
            match i.code {
                LD_W_ABS => acc = d.word(i.k),
                0x54 => acc &= i.k, // BPF_ALU | BPF_AND | BPF_K
                RET_K => return (i.k, ran),
                JMP_JA => pc += i.k as usize,
                code => {
                    let taken = match code {
                        JMP_JEQ_K => acc == i.k,
                        JMP_JGE_K => acc >= i.k,
                        0x25 => acc > i.k, // JGT
                        JMP_JSET_K => acc & i.k != 0,
                        c => panic!("opcode {c:#x} at {}", pc - 1),
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
            }
        }
    }

    /// The kernel's choice among the filters' results: the most
    /// restrictive action wins (signed order of the action bits).
    fn strictest(results: &[u32]) -> u32 {
        *results
            .iter()
            .min_by_key(|r| (**r & libc::SECCOMP_RET_ACTION_FULL) as i32)
            .unwrap()
    }

    /// What was installed before the front: the x32 program, the ENOSYS
    /// program and the chain, three filters, and with `notify` the
    /// metadata filter, a fourth.
    fn before(network: bool, notify: bool) -> Vec<BpfProgram> {
        let op = |code, k, jt, jf| sock_filter { code, jt, jf, k };
        let x32 = vec![
            op(LD_W_ABS, ARCH_OFFSET, 0, 0),
            op(JMP_JEQ_K, super::super::metadata::AUDIT_ARCH, 0, 3),
            op(LD_W_ABS, NR_OFFSET, 0, 0),
            op(JMP_JGE_K, 0x4000_0000, 0, 1),
            op(RET_K, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32, 0, 0),
            op(RET_K, libc::SECCOMP_RET_ALLOW, 0, 0),
        ];
        let enosys: BpfProgram = SeccompFilter::new(
            ENOSYS_CALLS.iter().map(|nr| (*nr, Vec::new())).collect(),
            SeccompAction::Allow,
            SeccompAction::Errno(libc::ENOSYS as u32),
            std::env::consts::ARCH.try_into().unwrap(),
        )
        .unwrap()
        .try_into()
        .unwrap();
        let mut all = vec![enosys, chain_program(network).unwrap().0];
        if cfg!(target_arch = "x86_64") {
            all.push(x32);
        }
        if notify {
            all.push(super::super::metadata::notify_program());
        }
        all
    }

    #[test]
    fn one_program_decides_every_call_as_the_separate_filters_did() {
        let arch = super::super::metadata::AUDIT_ARCH;
        // Argument values the rules look at, and values they do not.
        let mut values: Vec<u64> = vec![0, 1, 0x7fff_ffff, u64::MAX, 0x1_0000_0000];
        values.extend(
            [
                libc::AF_UNIX,
                libc::AF_INET,
                libc::AF_INET6,
                libc::AF_NETLINK,
            ]
            .map(|v| v as u64),
        );
        values.extend([libc::S_ISUID, libc::S_ISGID, 0o4755, 0o644].map(u64::from));
        values.extend([libc::O_CREAT, 0x40_0000, libc::O_RDWR].map(|v| v as u64));
        values.extend(
            [
                libc::CLONE_NEWNS,
                libc::CLONE_NEWUSER,
                libc::CLONE_NEWNET,
                libc::SIGCHLD,
            ]
            .map(|v| v as u64),
        );
        values.extend([0x4008_6602u64, 0x4004_6602, 0x401c_5820, 0x5401]);
        let mut numbers: Vec<u32> = (0..1024).collect();
        numbers.extend([0x4000_0000, 0x4000_0000 + 39, 0x4000_0000 + 435, u32::MAX]);
        for (network, notify) in [(false, false), (false, true), (true, false), (true, true)] {
            let merged = seccomp_program(network, notify).unwrap();
            let separate = before(network, notify);
            let mut checked = 0;
            for a in [arch, 0x4000_0003 /* i386 */, 0] {
                for &nr in &numbers {
                    for (slot, v) in values.iter().enumerate() {
                        let mut args = [0u64; 6];
                        // The value in every argument position at once and
                        // alone in one position.
                        for (i, arg) in args.iter_mut().enumerate() {
                            if slot % 2 == 0 || i == slot % 6 {
                                *arg = *v;
                            }
                        }
                        let d = Data { nr, arch: a, args };
                        let want =
                            strictest(&separate.iter().map(|p| run(p, &d)).collect::<Vec<_>>());
                        assert_eq!(
                            run(&merged, &d),
                            want,
                            "nr {nr} arch {a:#x} args {args:?} network {network}"
                        );
                        checked += 1;
                    }
                }
            }
            assert_eq!(checked, 3 * numbers.len() * values.len());
        }
        // What the probes in tests/sandbox_worker.rs expect, here too.
        let merged = seccomp_program(false, true).unwrap();
        let call = |nr: i64, args: [u64; 6]| {
            run(
                &merged,
                &Data {
                    nr: nr as u32,
                    arch,
                    args,
                },
            )
        };
        let errno = |e: i32| libc::SECCOMP_RET_ERRNO | e as u32;
        assert_eq!(call(libc::SYS_clone3, [0; 6]), errno(libc::ENOSYS));
        assert_eq!(call(libc::SYS_openat2, [0; 6]), errno(libc::ENOSYS));
        assert_eq!(call(SYS_OPEN_TREE_ATTR, [0; 6]), errno(libc::EPERM));
        assert_eq!(call(libc::SYS_ptrace, [0; 6]), errno(libc::EPERM));
        assert_eq!(call(libc::SYS_getpid, [0; 6]), libc::SECCOMP_RET_ALLOW);
        assert_eq!(
            call(libc::SYS_socket, [libc::AF_INET as u64, 0, 0, 0, 0, 0]),
            errno(libc::EPERM)
        );
        assert_eq!(
            call(libc::SYS_socket, [libc::AF_UNIX as u64, 0, 0, 0, 0, 0]),
            libc::SECCOMP_RET_ALLOW
        );
        assert_eq!(
            run(
                &merged,
                &Data {
                    nr: 39,
                    arch: 0x4000_0003,
                    args: [0; 6]
                }
            ),
            libc::SECCOMP_RET_KILL_PROCESS
        );
        #[cfg(target_arch = "x86_64")]
        assert_eq!(call(0x4000_0000 + 39, [0; 6]), errno(libc::EPERM));
    }

    /// A call no rule names and the metadata filter does not notify is
    /// allowed by the front's search alone, not after the tail compared it
    /// with each of its calls (49 instructions for `getpid` before).
    #[test]
    fn an_ordinary_call_is_allowed_by_the_front() {
        let merged = seccomp_program(false, true).unwrap();
        for nr in [
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_close,
            libc::SYS_mmap,
            libc::SYS_getpid,
            libc::SYS_execve,
        ] {
            let d = Data {
                nr: nr as u32,
                arch: super::super::metadata::AUDIT_ARCH,
                args: [0; 6],
            };
            let (action, ran) = run_counted(&merged, &d);
            assert_eq!(action, libc::SECCOMP_RET_ALLOW, "call {nr}");
            assert!(ran <= 16, "call {nr}: {ran} instructions");
        }
    }

    #[test]
    fn the_front_is_short() {
        let (chain, _) = chain_program(false).unwrap();
        let merged = seccomp_program(false, false).unwrap();
        // Well under the kernel's 4,096 instructions, and the front adds
        // a fraction of the chain.
        assert!(
            merged.len() < chain.len() + chain.len() / 2,
            "{} vs {}",
            merged.len(),
            chain.len()
        );
    }
}
