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
        libc::SYS_iopl,
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

/// `clone3` passes its flags in memory a filter cannot read: refuse it with
/// ENOSYS so libc falls back to `clone`, whose flags the first filter sees.
fn clone3_program() -> Result<BpfProgram, String> {
    let err = |e: seccompiler::BackendError| format!("seccomp: {e}");
    let arch = std::env::consts::ARCH.try_into().map_err(err)?;
    let filter = SeccompFilter::new(
        [(libc::SYS_clone3, Vec::new())].into_iter().collect(),
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

pub(super) fn apply_seccomp(network: bool) -> Result<(), String> {
    let main = seccomp_program(network)?;
    let clone3 = clone3_program()?;
    #[cfg(target_arch = "x86_64")]
    seccompiler::apply_filter(&x32_program()).map_err(|e| format!("seccomp: {e}"))?;
    seccompiler::apply_filter(&clone3).map_err(|e| format!("seccomp: {e}"))?;
    seccompiler::apply_filter(&main).map_err(|e| format!("seccomp: {e}"))
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
