/* rdma-qsm internal: data/ -- MRs, windows and posts of work requests through a queue.  It
 * offers nothing to other layers (only the public API, <qsm/data.h>); it stands on queue/. */
#ifndef QSM_DATA_LAYER_H
#define QSM_DATA_LAYER_H

#include "queue/queue.h"

#endif
