/* rdma-qsm: the umbrella header.  Include this one.
 * See qsm(7) for the overview and one man page per function. */
#ifndef QSM_QSM_H
#define QSM_QSM_H

#include <qsm/events.h>
#include <qsm/machine.h>
#include <qsm/ctx.h>
#include <qsm/data.h>
#include <qsm/sim.h>

#endif
