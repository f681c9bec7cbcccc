/* rdma-qsm: the umbrella header of the API for ULPs.  Include this one.
 * See qsm(7) for the overview and one man page per function.  The fabrics have headers of
 * their own: <qsm/rdmacm.h> for the real one, <qsm/sim.h> for the simulator (tests). */
#ifndef QSM_QSM_H
#define QSM_QSM_H

#include <qsm/events.h>
#include <qsm/machine.h>
#include <qsm/ctx.h>
#include <qsm/data.h>

#endif
