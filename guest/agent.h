/* The guest agent (agent.c): PID 1's request loop when fd 0 is the channel. */
#ifndef SANDWEAVE_AGENT_H
#define SANDWEAVE_AGENT_H
#include <signal.h>

/* Serves the channel on fd 0 until SIGTERM or SIGINT (returns 0), reaping
 * every child. `signals` are blocked already and are taken with a signalfd.
 * Returns -1 when it cannot serve at all (the caller falls back to reaping). */
int agent_serve(const sigset_t* signals);

#endif
