#include <sys/syscall.h>

#include <vector>

#include "lib/audit/wire.hpp"

// Syscall names for the host ABI, from the libc headers (every name guarded so
// the table builds on any architecture). Used to name schematized syscall
// records and to know which raw syscall/sysno/<N> points a rich point covers.

namespace sandweave::audit {
namespace {

struct SyscallEntry {
    std::uint64_t number;
    std::string_view name;
};

#define SW_SC(name) \
    { SYS_##name, #name }
const SyscallEntry kSyscalls[] = {
#ifdef SYS__sysctl
    SW_SC(_sysctl),
#endif
#ifdef SYS_accept
    SW_SC(accept),
#endif
#ifdef SYS_accept4
    SW_SC(accept4),
#endif
#ifdef SYS_access
    SW_SC(access),
#endif
#ifdef SYS_acct
    SW_SC(acct),
#endif
#ifdef SYS_add_key
    SW_SC(add_key),
#endif
#ifdef SYS_adjtimex
    SW_SC(adjtimex),
#endif
#ifdef SYS_afs_syscall
    SW_SC(afs_syscall),
#endif
#ifdef SYS_alarm
    SW_SC(alarm),
#endif
#ifdef SYS_arch_prctl
    SW_SC(arch_prctl),
#endif
#ifdef SYS_bind
    SW_SC(bind),
#endif
#ifdef SYS_bpf
    SW_SC(bpf),
#endif
#ifdef SYS_brk
    SW_SC(brk),
#endif
#ifdef SYS_capget
    SW_SC(capget),
#endif
#ifdef SYS_capset
    SW_SC(capset),
#endif
#ifdef SYS_chdir
    SW_SC(chdir),
#endif
#ifdef SYS_chmod
    SW_SC(chmod),
#endif
#ifdef SYS_chown
    SW_SC(chown),
#endif
#ifdef SYS_chroot
    SW_SC(chroot),
#endif
#ifdef SYS_clock_adjtime
    SW_SC(clock_adjtime),
#endif
#ifdef SYS_clock_getres
    SW_SC(clock_getres),
#endif
#ifdef SYS_clock_gettime
    SW_SC(clock_gettime),
#endif
#ifdef SYS_clock_nanosleep
    SW_SC(clock_nanosleep),
#endif
#ifdef SYS_clock_settime
    SW_SC(clock_settime),
#endif
#ifdef SYS_clone
    SW_SC(clone),
#endif
#ifdef SYS_clone3
    SW_SC(clone3),
#endif
#ifdef SYS_close
    SW_SC(close),
#endif
#ifdef SYS_close_range
    SW_SC(close_range),
#endif
#ifdef SYS_connect
    SW_SC(connect),
#endif
#ifdef SYS_copy_file_range
    SW_SC(copy_file_range),
#endif
#ifdef SYS_creat
    SW_SC(creat),
#endif
#ifdef SYS_create_module
    SW_SC(create_module),
#endif
#ifdef SYS_delete_module
    SW_SC(delete_module),
#endif
#ifdef SYS_dup
    SW_SC(dup),
#endif
#ifdef SYS_dup2
    SW_SC(dup2),
#endif
#ifdef SYS_dup3
    SW_SC(dup3),
#endif
#ifdef SYS_epoll_create
    SW_SC(epoll_create),
#endif
#ifdef SYS_epoll_create1
    SW_SC(epoll_create1),
#endif
#ifdef SYS_epoll_ctl
    SW_SC(epoll_ctl),
#endif
#ifdef SYS_epoll_ctl_old
    SW_SC(epoll_ctl_old),
#endif
#ifdef SYS_epoll_pwait
    SW_SC(epoll_pwait),
#endif
#ifdef SYS_epoll_pwait2
    SW_SC(epoll_pwait2),
#endif
#ifdef SYS_epoll_wait
    SW_SC(epoll_wait),
#endif
#ifdef SYS_epoll_wait_old
    SW_SC(epoll_wait_old),
#endif
#ifdef SYS_eventfd
    SW_SC(eventfd),
#endif
#ifdef SYS_eventfd2
    SW_SC(eventfd2),
#endif
#ifdef SYS_execve
    SW_SC(execve),
#endif
#ifdef SYS_execveat
    SW_SC(execveat),
#endif
#ifdef SYS_exit
    SW_SC(exit),
#endif
#ifdef SYS_exit_group
    SW_SC(exit_group),
#endif
#ifdef SYS_faccessat
    SW_SC(faccessat),
#endif
#ifdef SYS_faccessat2
    SW_SC(faccessat2),
#endif
#ifdef SYS_fadvise64
    SW_SC(fadvise64),
#endif
#ifdef SYS_fallocate
    SW_SC(fallocate),
#endif
#ifdef SYS_fanotify_init
    SW_SC(fanotify_init),
#endif
#ifdef SYS_fanotify_mark
    SW_SC(fanotify_mark),
#endif
#ifdef SYS_fchdir
    SW_SC(fchdir),
#endif
#ifdef SYS_fchmod
    SW_SC(fchmod),
#endif
#ifdef SYS_fchmodat
    SW_SC(fchmodat),
#endif
#ifdef SYS_fchown
    SW_SC(fchown),
#endif
#ifdef SYS_fchownat
    SW_SC(fchownat),
#endif
#ifdef SYS_fcntl
    SW_SC(fcntl),
#endif
#ifdef SYS_fdatasync
    SW_SC(fdatasync),
#endif
#ifdef SYS_fgetxattr
    SW_SC(fgetxattr),
#endif
#ifdef SYS_finit_module
    SW_SC(finit_module),
#endif
#ifdef SYS_flistxattr
    SW_SC(flistxattr),
#endif
#ifdef SYS_flock
    SW_SC(flock),
#endif
#ifdef SYS_fork
    SW_SC(fork),
#endif
#ifdef SYS_fremovexattr
    SW_SC(fremovexattr),
#endif
#ifdef SYS_fsconfig
    SW_SC(fsconfig),
#endif
#ifdef SYS_fsetxattr
    SW_SC(fsetxattr),
#endif
#ifdef SYS_fsmount
    SW_SC(fsmount),
#endif
#ifdef SYS_fsopen
    SW_SC(fsopen),
#endif
#ifdef SYS_fspick
    SW_SC(fspick),
#endif
#ifdef SYS_fstat
    SW_SC(fstat),
#endif
#ifdef SYS_fstatfs
    SW_SC(fstatfs),
#endif
#ifdef SYS_fsync
    SW_SC(fsync),
#endif
#ifdef SYS_ftruncate
    SW_SC(ftruncate),
#endif
#ifdef SYS_futex
    SW_SC(futex),
#endif
#ifdef SYS_futex_waitv
    SW_SC(futex_waitv),
#endif
#ifdef SYS_futimesat
    SW_SC(futimesat),
#endif
#ifdef SYS_get_kernel_syms
    SW_SC(get_kernel_syms),
#endif
#ifdef SYS_get_mempolicy
    SW_SC(get_mempolicy),
#endif
#ifdef SYS_get_robust_list
    SW_SC(get_robust_list),
#endif
#ifdef SYS_get_thread_area
    SW_SC(get_thread_area),
#endif
#ifdef SYS_getcpu
    SW_SC(getcpu),
#endif
#ifdef SYS_getcwd
    SW_SC(getcwd),
#endif
#ifdef SYS_getdents
    SW_SC(getdents),
#endif
#ifdef SYS_getdents64
    SW_SC(getdents64),
#endif
#ifdef SYS_getegid
    SW_SC(getegid),
#endif
#ifdef SYS_geteuid
    SW_SC(geteuid),
#endif
#ifdef SYS_getgid
    SW_SC(getgid),
#endif
#ifdef SYS_getgroups
    SW_SC(getgroups),
#endif
#ifdef SYS_getitimer
    SW_SC(getitimer),
#endif
#ifdef SYS_getpeername
    SW_SC(getpeername),
#endif
#ifdef SYS_getpgid
    SW_SC(getpgid),
#endif
#ifdef SYS_getpgrp
    SW_SC(getpgrp),
#endif
#ifdef SYS_getpid
    SW_SC(getpid),
#endif
#ifdef SYS_getpmsg
    SW_SC(getpmsg),
#endif
#ifdef SYS_getppid
    SW_SC(getppid),
#endif
#ifdef SYS_getpriority
    SW_SC(getpriority),
#endif
#ifdef SYS_getrandom
    SW_SC(getrandom),
#endif
#ifdef SYS_getresgid
    SW_SC(getresgid),
#endif
#ifdef SYS_getresuid
    SW_SC(getresuid),
#endif
#ifdef SYS_getrlimit
    SW_SC(getrlimit),
#endif
#ifdef SYS_getrusage
    SW_SC(getrusage),
#endif
#ifdef SYS_getsid
    SW_SC(getsid),
#endif
#ifdef SYS_getsockname
    SW_SC(getsockname),
#endif
#ifdef SYS_getsockopt
    SW_SC(getsockopt),
#endif
#ifdef SYS_gettid
    SW_SC(gettid),
#endif
#ifdef SYS_gettimeofday
    SW_SC(gettimeofday),
#endif
#ifdef SYS_getuid
    SW_SC(getuid),
#endif
#ifdef SYS_getxattr
    SW_SC(getxattr),
#endif
#ifdef SYS_init_module
    SW_SC(init_module),
#endif
#ifdef SYS_inotify_add_watch
    SW_SC(inotify_add_watch),
#endif
#ifdef SYS_inotify_init
    SW_SC(inotify_init),
#endif
#ifdef SYS_inotify_init1
    SW_SC(inotify_init1),
#endif
#ifdef SYS_inotify_rm_watch
    SW_SC(inotify_rm_watch),
#endif
#ifdef SYS_io_cancel
    SW_SC(io_cancel),
#endif
#ifdef SYS_io_destroy
    SW_SC(io_destroy),
#endif
#ifdef SYS_io_getevents
    SW_SC(io_getevents),
#endif
#ifdef SYS_io_pgetevents
    SW_SC(io_pgetevents),
#endif
#ifdef SYS_io_setup
    SW_SC(io_setup),
#endif
#ifdef SYS_io_submit
    SW_SC(io_submit),
#endif
#ifdef SYS_io_uring_enter
    SW_SC(io_uring_enter),
#endif
#ifdef SYS_io_uring_register
    SW_SC(io_uring_register),
#endif
#ifdef SYS_io_uring_setup
    SW_SC(io_uring_setup),
#endif
#ifdef SYS_ioctl
    SW_SC(ioctl),
#endif
#ifdef SYS_ioperm
    SW_SC(ioperm),
#endif
#ifdef SYS_iopl
    SW_SC(iopl),
#endif
#ifdef SYS_ioprio_get
    SW_SC(ioprio_get),
#endif
#ifdef SYS_ioprio_set
    SW_SC(ioprio_set),
#endif
#ifdef SYS_kcmp
    SW_SC(kcmp),
#endif
#ifdef SYS_kexec_file_load
    SW_SC(kexec_file_load),
#endif
#ifdef SYS_kexec_load
    SW_SC(kexec_load),
#endif
#ifdef SYS_keyctl
    SW_SC(keyctl),
#endif
#ifdef SYS_kill
    SW_SC(kill),
#endif
#ifdef SYS_landlock_add_rule
    SW_SC(landlock_add_rule),
#endif
#ifdef SYS_landlock_create_ruleset
    SW_SC(landlock_create_ruleset),
#endif
#ifdef SYS_landlock_restrict_self
    SW_SC(landlock_restrict_self),
#endif
#ifdef SYS_lchown
    SW_SC(lchown),
#endif
#ifdef SYS_lgetxattr
    SW_SC(lgetxattr),
#endif
#ifdef SYS_link
    SW_SC(link),
#endif
#ifdef SYS_linkat
    SW_SC(linkat),
#endif
#ifdef SYS_listen
    SW_SC(listen),
#endif
#ifdef SYS_listxattr
    SW_SC(listxattr),
#endif
#ifdef SYS_llistxattr
    SW_SC(llistxattr),
#endif
#ifdef SYS_lookup_dcookie
    SW_SC(lookup_dcookie),
#endif
#ifdef SYS_lremovexattr
    SW_SC(lremovexattr),
#endif
#ifdef SYS_lseek
    SW_SC(lseek),
#endif
#ifdef SYS_lsetxattr
    SW_SC(lsetxattr),
#endif
#ifdef SYS_lstat
    SW_SC(lstat),
#endif
#ifdef SYS_madvise
    SW_SC(madvise),
#endif
#ifdef SYS_mbind
    SW_SC(mbind),
#endif
#ifdef SYS_membarrier
    SW_SC(membarrier),
#endif
#ifdef SYS_memfd_create
    SW_SC(memfd_create),
#endif
#ifdef SYS_memfd_secret
    SW_SC(memfd_secret),
#endif
#ifdef SYS_migrate_pages
    SW_SC(migrate_pages),
#endif
#ifdef SYS_mincore
    SW_SC(mincore),
#endif
#ifdef SYS_mkdir
    SW_SC(mkdir),
#endif
#ifdef SYS_mkdirat
    SW_SC(mkdirat),
#endif
#ifdef SYS_mknod
    SW_SC(mknod),
#endif
#ifdef SYS_mknodat
    SW_SC(mknodat),
#endif
#ifdef SYS_mlock
    SW_SC(mlock),
#endif
#ifdef SYS_mlock2
    SW_SC(mlock2),
#endif
#ifdef SYS_mlockall
    SW_SC(mlockall),
#endif
#ifdef SYS_mmap
    SW_SC(mmap),
#endif
#ifdef SYS_modify_ldt
    SW_SC(modify_ldt),
#endif
#ifdef SYS_mount
    SW_SC(mount),
#endif
#ifdef SYS_mount_setattr
    SW_SC(mount_setattr),
#endif
#ifdef SYS_move_mount
    SW_SC(move_mount),
#endif
#ifdef SYS_move_pages
    SW_SC(move_pages),
#endif
#ifdef SYS_mprotect
    SW_SC(mprotect),
#endif
#ifdef SYS_mq_getsetattr
    SW_SC(mq_getsetattr),
#endif
#ifdef SYS_mq_notify
    SW_SC(mq_notify),
#endif
#ifdef SYS_mq_open
    SW_SC(mq_open),
#endif
#ifdef SYS_mq_timedreceive
    SW_SC(mq_timedreceive),
#endif
#ifdef SYS_mq_timedsend
    SW_SC(mq_timedsend),
#endif
#ifdef SYS_mq_unlink
    SW_SC(mq_unlink),
#endif
#ifdef SYS_mremap
    SW_SC(mremap),
#endif
#ifdef SYS_msgctl
    SW_SC(msgctl),
#endif
#ifdef SYS_msgget
    SW_SC(msgget),
#endif
#ifdef SYS_msgrcv
    SW_SC(msgrcv),
#endif
#ifdef SYS_msgsnd
    SW_SC(msgsnd),
#endif
#ifdef SYS_msync
    SW_SC(msync),
#endif
#ifdef SYS_munlock
    SW_SC(munlock),
#endif
#ifdef SYS_munlockall
    SW_SC(munlockall),
#endif
#ifdef SYS_munmap
    SW_SC(munmap),
#endif
#ifdef SYS_name_to_handle_at
    SW_SC(name_to_handle_at),
#endif
#ifdef SYS_nanosleep
    SW_SC(nanosleep),
#endif
#ifdef SYS_newfstatat
    SW_SC(newfstatat),
#endif
#ifdef SYS_nfsservctl
    SW_SC(nfsservctl),
#endif
#ifdef SYS_open
    SW_SC(open),
#endif
#ifdef SYS_open_by_handle_at
    SW_SC(open_by_handle_at),
#endif
#ifdef SYS_open_tree
    SW_SC(open_tree),
#endif
#ifdef SYS_openat
    SW_SC(openat),
#endif
#ifdef SYS_openat2
    SW_SC(openat2),
#endif
#ifdef SYS_pause
    SW_SC(pause),
#endif
#ifdef SYS_perf_event_open
    SW_SC(perf_event_open),
#endif
#ifdef SYS_personality
    SW_SC(personality),
#endif
#ifdef SYS_pidfd_getfd
    SW_SC(pidfd_getfd),
#endif
#ifdef SYS_pidfd_open
    SW_SC(pidfd_open),
#endif
#ifdef SYS_pidfd_send_signal
    SW_SC(pidfd_send_signal),
#endif
#ifdef SYS_pipe
    SW_SC(pipe),
#endif
#ifdef SYS_pipe2
    SW_SC(pipe2),
#endif
#ifdef SYS_pivot_root
    SW_SC(pivot_root),
#endif
#ifdef SYS_pkey_alloc
    SW_SC(pkey_alloc),
#endif
#ifdef SYS_pkey_free
    SW_SC(pkey_free),
#endif
#ifdef SYS_pkey_mprotect
    SW_SC(pkey_mprotect),
#endif
#ifdef SYS_poll
    SW_SC(poll),
#endif
#ifdef SYS_ppoll
    SW_SC(ppoll),
#endif
#ifdef SYS_prctl
    SW_SC(prctl),
#endif
#ifdef SYS_pread64
    SW_SC(pread64),
#endif
#ifdef SYS_preadv
    SW_SC(preadv),
#endif
#ifdef SYS_preadv2
    SW_SC(preadv2),
#endif
#ifdef SYS_prlimit64
    SW_SC(prlimit64),
#endif
#ifdef SYS_process_madvise
    SW_SC(process_madvise),
#endif
#ifdef SYS_process_mrelease
    SW_SC(process_mrelease),
#endif
#ifdef SYS_process_vm_readv
    SW_SC(process_vm_readv),
#endif
#ifdef SYS_process_vm_writev
    SW_SC(process_vm_writev),
#endif
#ifdef SYS_pselect6
    SW_SC(pselect6),
#endif
#ifdef SYS_ptrace
    SW_SC(ptrace),
#endif
#ifdef SYS_putpmsg
    SW_SC(putpmsg),
#endif
#ifdef SYS_pwrite64
    SW_SC(pwrite64),
#endif
#ifdef SYS_pwritev
    SW_SC(pwritev),
#endif
#ifdef SYS_pwritev2
    SW_SC(pwritev2),
#endif
#ifdef SYS_query_module
    SW_SC(query_module),
#endif
#ifdef SYS_quotactl
    SW_SC(quotactl),
#endif
#ifdef SYS_quotactl_fd
    SW_SC(quotactl_fd),
#endif
#ifdef SYS_read
    SW_SC(read),
#endif
#ifdef SYS_readahead
    SW_SC(readahead),
#endif
#ifdef SYS_readlink
    SW_SC(readlink),
#endif
#ifdef SYS_readlinkat
    SW_SC(readlinkat),
#endif
#ifdef SYS_readv
    SW_SC(readv),
#endif
#ifdef SYS_reboot
    SW_SC(reboot),
#endif
#ifdef SYS_recvfrom
    SW_SC(recvfrom),
#endif
#ifdef SYS_recvmmsg
    SW_SC(recvmmsg),
#endif
#ifdef SYS_recvmsg
    SW_SC(recvmsg),
#endif
#ifdef SYS_remap_file_pages
    SW_SC(remap_file_pages),
#endif
#ifdef SYS_removexattr
    SW_SC(removexattr),
#endif
#ifdef SYS_rename
    SW_SC(rename),
#endif
#ifdef SYS_renameat
    SW_SC(renameat),
#endif
#ifdef SYS_renameat2
    SW_SC(renameat2),
#endif
#ifdef SYS_request_key
    SW_SC(request_key),
#endif
#ifdef SYS_restart_syscall
    SW_SC(restart_syscall),
#endif
#ifdef SYS_rmdir
    SW_SC(rmdir),
#endif
#ifdef SYS_rseq
    SW_SC(rseq),
#endif
#ifdef SYS_rt_sigaction
    SW_SC(rt_sigaction),
#endif
#ifdef SYS_rt_sigpending
    SW_SC(rt_sigpending),
#endif
#ifdef SYS_rt_sigprocmask
    SW_SC(rt_sigprocmask),
#endif
#ifdef SYS_rt_sigqueueinfo
    SW_SC(rt_sigqueueinfo),
#endif
#ifdef SYS_rt_sigreturn
    SW_SC(rt_sigreturn),
#endif
#ifdef SYS_rt_sigsuspend
    SW_SC(rt_sigsuspend),
#endif
#ifdef SYS_rt_sigtimedwait
    SW_SC(rt_sigtimedwait),
#endif
#ifdef SYS_rt_tgsigqueueinfo
    SW_SC(rt_tgsigqueueinfo),
#endif
#ifdef SYS_sched_get_priority_max
    SW_SC(sched_get_priority_max),
#endif
#ifdef SYS_sched_get_priority_min
    SW_SC(sched_get_priority_min),
#endif
#ifdef SYS_sched_getaffinity
    SW_SC(sched_getaffinity),
#endif
#ifdef SYS_sched_getattr
    SW_SC(sched_getattr),
#endif
#ifdef SYS_sched_getparam
    SW_SC(sched_getparam),
#endif
#ifdef SYS_sched_getscheduler
    SW_SC(sched_getscheduler),
#endif
#ifdef SYS_sched_rr_get_interval
    SW_SC(sched_rr_get_interval),
#endif
#ifdef SYS_sched_setaffinity
    SW_SC(sched_setaffinity),
#endif
#ifdef SYS_sched_setattr
    SW_SC(sched_setattr),
#endif
#ifdef SYS_sched_setparam
    SW_SC(sched_setparam),
#endif
#ifdef SYS_sched_setscheduler
    SW_SC(sched_setscheduler),
#endif
#ifdef SYS_sched_yield
    SW_SC(sched_yield),
#endif
#ifdef SYS_seccomp
    SW_SC(seccomp),
#endif
#ifdef SYS_security
    SW_SC(security),
#endif
#ifdef SYS_select
    SW_SC(select),
#endif
#ifdef SYS_semctl
    SW_SC(semctl),
#endif
#ifdef SYS_semget
    SW_SC(semget),
#endif
#ifdef SYS_semop
    SW_SC(semop),
#endif
#ifdef SYS_semtimedop
    SW_SC(semtimedop),
#endif
#ifdef SYS_sendfile
    SW_SC(sendfile),
#endif
#ifdef SYS_sendmmsg
    SW_SC(sendmmsg),
#endif
#ifdef SYS_sendmsg
    SW_SC(sendmsg),
#endif
#ifdef SYS_sendto
    SW_SC(sendto),
#endif
#ifdef SYS_set_mempolicy
    SW_SC(set_mempolicy),
#endif
#ifdef SYS_set_mempolicy_home_node
    SW_SC(set_mempolicy_home_node),
#endif
#ifdef SYS_set_robust_list
    SW_SC(set_robust_list),
#endif
#ifdef SYS_set_thread_area
    SW_SC(set_thread_area),
#endif
#ifdef SYS_set_tid_address
    SW_SC(set_tid_address),
#endif
#ifdef SYS_setdomainname
    SW_SC(setdomainname),
#endif
#ifdef SYS_setfsgid
    SW_SC(setfsgid),
#endif
#ifdef SYS_setfsuid
    SW_SC(setfsuid),
#endif
#ifdef SYS_setgid
    SW_SC(setgid),
#endif
#ifdef SYS_setgroups
    SW_SC(setgroups),
#endif
#ifdef SYS_sethostname
    SW_SC(sethostname),
#endif
#ifdef SYS_setitimer
    SW_SC(setitimer),
#endif
#ifdef SYS_setns
    SW_SC(setns),
#endif
#ifdef SYS_setpgid
    SW_SC(setpgid),
#endif
#ifdef SYS_setpriority
    SW_SC(setpriority),
#endif
#ifdef SYS_setregid
    SW_SC(setregid),
#endif
#ifdef SYS_setresgid
    SW_SC(setresgid),
#endif
#ifdef SYS_setresuid
    SW_SC(setresuid),
#endif
#ifdef SYS_setreuid
    SW_SC(setreuid),
#endif
#ifdef SYS_setrlimit
    SW_SC(setrlimit),
#endif
#ifdef SYS_setsid
    SW_SC(setsid),
#endif
#ifdef SYS_setsockopt
    SW_SC(setsockopt),
#endif
#ifdef SYS_settimeofday
    SW_SC(settimeofday),
#endif
#ifdef SYS_setuid
    SW_SC(setuid),
#endif
#ifdef SYS_setxattr
    SW_SC(setxattr),
#endif
#ifdef SYS_shmat
    SW_SC(shmat),
#endif
#ifdef SYS_shmctl
    SW_SC(shmctl),
#endif
#ifdef SYS_shmdt
    SW_SC(shmdt),
#endif
#ifdef SYS_shmget
    SW_SC(shmget),
#endif
#ifdef SYS_shutdown
    SW_SC(shutdown),
#endif
#ifdef SYS_sigaltstack
    SW_SC(sigaltstack),
#endif
#ifdef SYS_signalfd
    SW_SC(signalfd),
#endif
#ifdef SYS_signalfd4
    SW_SC(signalfd4),
#endif
#ifdef SYS_socket
    SW_SC(socket),
#endif
#ifdef SYS_socketpair
    SW_SC(socketpair),
#endif
#ifdef SYS_splice
    SW_SC(splice),
#endif
#ifdef SYS_stat
    SW_SC(stat),
#endif
#ifdef SYS_statfs
    SW_SC(statfs),
#endif
#ifdef SYS_statx
    SW_SC(statx),
#endif
#ifdef SYS_swapoff
    SW_SC(swapoff),
#endif
#ifdef SYS_swapon
    SW_SC(swapon),
#endif
#ifdef SYS_symlink
    SW_SC(symlink),
#endif
#ifdef SYS_symlinkat
    SW_SC(symlinkat),
#endif
#ifdef SYS_sync
    SW_SC(sync),
#endif
#ifdef SYS_sync_file_range
    SW_SC(sync_file_range),
#endif
#ifdef SYS_syncfs
    SW_SC(syncfs),
#endif
#ifdef SYS_sysfs
    SW_SC(sysfs),
#endif
#ifdef SYS_sysinfo
    SW_SC(sysinfo),
#endif
#ifdef SYS_syslog
    SW_SC(syslog),
#endif
#ifdef SYS_tee
    SW_SC(tee),
#endif
#ifdef SYS_tgkill
    SW_SC(tgkill),
#endif
#ifdef SYS_time
    SW_SC(time),
#endif
#ifdef SYS_timer_create
    SW_SC(timer_create),
#endif
#ifdef SYS_timer_delete
    SW_SC(timer_delete),
#endif
#ifdef SYS_timer_getoverrun
    SW_SC(timer_getoverrun),
#endif
#ifdef SYS_timer_gettime
    SW_SC(timer_gettime),
#endif
#ifdef SYS_timer_settime
    SW_SC(timer_settime),
#endif
#ifdef SYS_timerfd_create
    SW_SC(timerfd_create),
#endif
#ifdef SYS_timerfd_gettime
    SW_SC(timerfd_gettime),
#endif
#ifdef SYS_timerfd_settime
    SW_SC(timerfd_settime),
#endif
#ifdef SYS_times
    SW_SC(times),
#endif
#ifdef SYS_tkill
    SW_SC(tkill),
#endif
#ifdef SYS_truncate
    SW_SC(truncate),
#endif
#ifdef SYS_tuxcall
    SW_SC(tuxcall),
#endif
#ifdef SYS_umask
    SW_SC(umask),
#endif
#ifdef SYS_umount2
    SW_SC(umount2),
#endif
#ifdef SYS_uname
    SW_SC(uname),
#endif
#ifdef SYS_unlink
    SW_SC(unlink),
#endif
#ifdef SYS_unlinkat
    SW_SC(unlinkat),
#endif
#ifdef SYS_unshare
    SW_SC(unshare),
#endif
#ifdef SYS_uselib
    SW_SC(uselib),
#endif
#ifdef SYS_userfaultfd
    SW_SC(userfaultfd),
#endif
#ifdef SYS_ustat
    SW_SC(ustat),
#endif
#ifdef SYS_utime
    SW_SC(utime),
#endif
#ifdef SYS_utimensat
    SW_SC(utimensat),
#endif
#ifdef SYS_utimes
    SW_SC(utimes),
#endif
#ifdef SYS_vfork
    SW_SC(vfork),
#endif
#ifdef SYS_vhangup
    SW_SC(vhangup),
#endif
#ifdef SYS_vmsplice
    SW_SC(vmsplice),
#endif
#ifdef SYS_vserver
    SW_SC(vserver),
#endif
#ifdef SYS_wait4
    SW_SC(wait4),
#endif
#ifdef SYS_waitid
    SW_SC(waitid),
#endif
#ifdef SYS_write
    SW_SC(write),
#endif
#ifdef SYS_writev
    SW_SC(writev),
#endif
};
#undef SW_SC

}  // namespace

std::optional<std::string_view> syscall_name(std::uint64_t sysno) {
    // Every raw record names its syscall: an array by number, built once.
    static const std::vector<std::string_view> by_number = [] {
        std::vector<std::string_view> v;
        for (const auto& e : kSyscalls) {
            if (e.number >= 4096) continue;  // none on x86-64; looked up below
            if (v.size() <= e.number) v.resize(e.number + 1);
            v[e.number] = e.name;
        }
        return v;
    }();
    if (sysno < by_number.size())
        return by_number[sysno].empty() ? std::nullopt
                                        : std::optional<std::string_view>(by_number[sysno]);
    for (const auto& e : kSyscalls)
        if (e.number == sysno) return e.name;
    return std::nullopt;
}

std::optional<std::uint64_t> syscall_number(std::string_view name) {
    for (const auto& e : kSyscalls)
        if (e.name == name) return e.number;
    return std::nullopt;
}

}  // namespace sandweave::audit
