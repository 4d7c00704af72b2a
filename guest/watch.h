/* `init --watch`: a directory watch for the host (watch.c). */
#ifndef SANDWEAVE_WATCH_H
#define SANDWEAVE_WATCH_H

/* argv[1] is "--watch"; returns the exit status (watch.c says which). */
int watch_main(int argc, char** argv);

#endif
