/*
 * Every process a command starts, however it detaches (setsid, a double
 * fork, a daemon reparented to PID 1), stays in the command's own cgroup of a
 * hierarchy only the agent can reach: PID 1 mounts it while it still has
 * CAP_SYS_ADMIN (the only capability the guest's init has beyond a root
 * command's), keeps a descriptor on its root, detaches the mount and drops
 * the capability for itself and everything it starts. A guest process can
 * neither see nor write the hierarchy, so it cannot leave its group;
 * /proc/PID/cgroup shows a `job:/cN` line. docs/agent.md, "Process trees".
 *
 * The group of the next command is made ahead of time (off the path of a
 * command's start); the vfork child joins it with one write before its
 * execve. Without the hierarchy (an init that never had the capability)
 * every call is a no-op that reports it, and the caller falls back to the
 * command's session.
 */
#ifndef SANDWEAVE_COMMAND_GROUP_H
#define SANDWEAVE_COMMAND_GROUP_H

struct command_group {
    unsigned number; /* its directory is cN; 0: none */
    int procs;       /* its cgroup.procs, read and write; -1: none */
};

/* In PID 1 at start: set up the hierarchy, then drop CAP_SYS_ADMIN whatever
 * happened. Returns 0 when commands get groups. */
int command_group_setup(void);

/* Hands out a fresh empty group into *g (one made ahead, or a new one); a
 * group with procs -1 when there is no hierarchy or it cannot be made. */
void command_group_take(struct command_group* g);

/* Makes the group the next command takes, when there is none. Cheap to call
 * often: once made it returns at once. */
void command_group_prepare(void);

/* In the vfork child, before execve: the calling process joins the group. */
int command_group_join(const struct command_group* g);

/* Sends `sig` to every process of the group. With SIGKILL it reads the group
 * again until it is empty (a fork under way when it was read) or a few times.
 * Returns -1 when the group has no hierarchy (the caller falls back). */
int command_group_signal(const struct command_group* g, int sig);

/* The command has ended: its group is removed once empty. With `doomed`,
 * whatever is still in it is killed whenever command_group_sweep runs. */
void command_group_release(struct command_group* g, int doomed);

/* The agent reaped a process that was no command of its own (an orphan): a
 * lingering group may have emptied. */
void command_group_orphan_reaped(void);

/* Removes released groups that are empty and kills what is left in doomed
 * ones. Run after a reap and after output is flushed. */
void command_group_sweep(void);

#endif
