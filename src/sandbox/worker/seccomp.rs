//! The seccomp filters of every confined level: system calls that reach
//! other processes or kernel state Landlock does not govern (ptrace,
//! io_uring, bpf, mounts, namespaces, keyrings, …), non-UNIX sockets without
//! network, `clone3` (answered ENOSYS), and every x32 system call.
//!
//! Not here: filesystem access ([`super::landlock`]).

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

/// The seccomp program: `EPERM` for the listed syscalls, for `socket` with
/// a family other than AF_UNIX (unless `network`), and for `clone` with a
/// namespace flag.
fn seccomp_program(network: bool) -> Result<BpfProgram, String> {
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
    filter.try_into().map_err(err)
}

/// `setxattrat` (Linux 6.13): the path-and-fd form of `setxattr`.
const SYS_SETXATTRAT: i64 = 463;
/// `removexattrat` (Linux 6.13).
const SYS_REMOVEXATTRAT: i64 = 466;
/// `file_setattr` (Linux 6.17): inode flags through a path.
const SYS_FILE_SETATTR: i64 = 469;

/// `clone3` passes its flags in memory a filter cannot read: refuse it with
/// ENOSYS so libc falls back to `clone`, whose flags the first filter sees.
/// The same for the newest metadata calls, so that libc falls back to the
/// ones [`super::metadata`] traps.
fn clone3_program() -> Result<BpfProgram, String> {
    let err = |e: seccompiler::BackendError| format!("seccomp: {e}");
    let arch = std::env::consts::ARCH.try_into().map_err(err)?;
    let filter = SeccompFilter::new(
        [
            libc::SYS_clone3,
            SYS_SETXATTRAT,
            SYS_REMOVEXATTRAT,
            SYS_FILE_SETATTR,
        ]
        .into_iter()
        .map(|nr| (nr, Vec::new()))
        .collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(err)?;
    filter.try_into().map_err(err)
}

/// x32 system calls reach the same kernel entry points under numbers with
/// bit 30 set and the x86_64 audit arch, so the per-number rules above would
/// not see them: refuse every one (where the kernel has x32 at all).
#[cfg(target_arch = "x86_64")]
fn x32_program() -> BpfProgram {
    use seccompiler::sock_filter;
    // BPF_LD | BPF_W | BPF_ABS (the first two are 0).
    const LD_W_ABS: u16 = 0x20;
    const JMP_JEQ_K: u16 = 0x05 | 0x10;
    const JMP_JGE_K: u16 = 0x05 | 0x30;
    const RET_K: u16 = 0x06;
    const ARCH_OFFSET: u32 = 4;
    const NR_OFFSET: u32 = 0;
    const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let op = |code, k, jt, jf| sock_filter { code, jt, jf, k };
    vec![
        op(LD_W_ABS, ARCH_OFFSET, 0, 0),
        op(JMP_JEQ_K, AUDIT_ARCH_X86_64, 0, 3),
        op(LD_W_ABS, NR_OFFSET, 0, 0),
        op(JMP_JGE_K, X32_SYSCALL_BIT, 0, 1),
        op(RET_K, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32, 0, 0),
        op(RET_K, libc::SECCOMP_RET_ALLOW, 0, 0),
    ]
}

/// The programs of both network settings, compiled once per process (the
/// zygote compiles them before it forks any worker): they depend only on
/// the architecture and `network`, never on the command.
struct Programs {
    /// `seccomp_program(network)`, indexed by `network as usize`.
    main: [BpfProgram; 2],
    clone3: BpfProgram,
}

static PROGRAMS: std::sync::OnceLock<Result<Programs, String>> = std::sync::OnceLock::new();

fn programs() -> Result<&'static Programs, String> {
    PROGRAMS
        .get_or_init(|| {
            Ok(Programs {
                main: [seccomp_program(false)?, seccomp_program(true)?],
                clone3: clone3_program()?,
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Compiles the programs now (see [`super::prepare`]).
pub(super) fn prepare() {
    let _ = programs();
}

pub(super) fn apply_seccomp(network: bool) -> Result<(), String> {
    let p = programs()?;
    #[cfg(target_arch = "x86_64")]
    seccompiler::apply_filter(&x32_program()).map_err(|e| format!("seccomp: {e}"))?;
    seccompiler::apply_filter(&p.clone3).map_err(|e| format!("seccomp: {e}"))?;
    seccompiler::apply_filter(&p.main[usize::from(network)]).map_err(|e| format!("seccomp: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seccomp_programs_compile() {
        assert!(!seccomp_program(false).unwrap().is_empty());
        assert!(!seccomp_program(true).unwrap().is_empty());
        assert!(!clone3_program().unwrap().is_empty());
    }
}
