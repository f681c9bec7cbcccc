/* qsm-nvmet: the NVMe and NVMe over Fabrics wire formats the target speaks (NVMe Base 1.4,
 * NVMe over Fabrics 1.1 and its RDMA transport binding).  Little endian on the wire; offsets
 * in comments are bytes. */
#ifndef QSM_NVMET_NVME_H
#define QSM_NVMET_NVME_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

/* ---- RDMA CM private data (NVMe/RDMA transport binding, 3.3) ---- */
struct nvme_rdma_cm_req {        /* host -> target, with the connection request */
	uint16_t recfmt;         /* 0 */
	uint16_t qid;            /* 0 = admin queue */
	uint16_t hrqsize;        /* host receive queue size (1's based) */
	uint16_t hsqsize;        /* host send queue size (0's based) */
	uint16_t cntlid;         /* informational */
	uint8_t rsvd[22];
} __attribute__((packed));

struct nvme_rdma_cm_rep {        /* target -> host, with the accept */
	uint16_t recfmt;
	uint16_t crqsize;        /* controller receive queue size */
	uint8_t rsvd[28];
} __attribute__((packed));

struct nvme_rdma_cm_rej {        /* target -> host, with the reject */
	uint16_t recfmt;
	uint16_t sts;
} __attribute__((packed));

enum {
	NVME_RDMA_CM_INVALID_LEN = 1,
	NVME_RDMA_CM_INVALID_RECFMT = 2,
	NVME_RDMA_CM_INVALID_QID = 3,
	NVME_RDMA_CM_INVALID_HSQSIZE = 4,
	NVME_RDMA_CM_INVALID_HRQSIZE = 5,
	NVME_RDMA_CM_NO_RSC = 6,
};

/* ---- capsules ---- */
#define NVME_SQE_SIZE 64
#define NVME_CQE_SIZE 16

/* The 16-byte SGL descriptor in DPTR (SQE bytes 24..39). */
struct nvme_sgl {
	uint64_t addr;
	uint8_t length[3];
	uint8_t key[4];
	uint8_t type;            /* descriptor type << 4 | subtype */
} __attribute__((packed));

#define NVME_SGL_KEYED_DATA   0x4    /* keyed SGL data block (type) */
#define NVME_SGL_DATA_BLOCK   0x0
#define NVME_SGL_SUB_ADDRESS  0x0
#define NVME_SGL_SUB_OFFSET   0x1
#define NVME_SGL_SUB_INVALIDATE 0xf

#define NVME_CMD_FUSE_MASK 0x03      /* flags: FUSE (bits 0-1) */
#define NVME_CMD_PSDT_MASK 0xc0      /* flags: PSDT (bits 6-7) */
#define NVME_CMD_PSDT_SGL  0x40      /* 01b: SGLs, MPTR one contiguous buffer (fabrics: the only) */

struct nvme_sqe {
	uint8_t opcode;          /* 0 */
	uint8_t flags;           /* 1: FUSE (bits 0-1), PSDT (bits 6-7) = 01b for SGLs */
	uint16_t cid;            /* 2 */
	uint32_t nsid;           /* 4; fabrics commands: fctype in byte 4 */
	uint32_t cdw2, cdw3;     /* 8 */
	uint64_t mptr;           /* 16 */
	struct nvme_sgl sgl;     /* 24 */
	uint32_t cdw10, cdw11, cdw12, cdw13, cdw14, cdw15; /* 40 */
} __attribute__((packed));

struct nvme_cqe {
	uint64_t result;         /* 0: DW0 (+ DW1, e.g. an 8-byte property) */
	uint16_t sqhd;           /* 8 */
	uint16_t sqid;           /* 10 */
	uint16_t cid;            /* 12 */
	uint16_t status;         /* 14: phase (bit 0), SC (1-8), SCT (9-11), CRD, M, DNR (15) */
} __attribute__((packed));

_Static_assert(sizeof(struct nvme_sqe) == NVME_SQE_SIZE, "SQE is 64 bytes");
_Static_assert(sizeof(struct nvme_cqe) == NVME_CQE_SIZE, "CQE is 16 bytes");
_Static_assert(sizeof(struct nvme_rdma_cm_req) == 32, "CM REQ private data is 32 bytes");
_Static_assert(sizeof(struct nvme_rdma_cm_rep) == 32, "CM REP private data is 32 bytes");

/* Status: SCT << 8 | SC, as it goes into bits 1..11 of the CQE status; DNR separate. */
enum {
	NVME_SC_SUCCESS = 0x000,
	NVME_SC_INVALID_OPCODE = 0x001,
	NVME_SC_INVALID_FIELD = 0x002,
	NVME_SC_DATA_XFER_ERROR = 0x004,
	NVME_SC_INTERNAL = 0x006,
	NVME_SC_INVALID_NS = 0x00b,
	NVME_SC_CMD_SEQ_ERROR = 0x00c,
	NVME_SC_SGL_INVALID_LENGTH = 0x00f,   /* Data SGL Length Invalid */
	NVME_SC_SGL_INVALID_TYPE = 0x011,     /* SGL Descriptor Type Invalid */
	NVME_SC_SGL_INVALID_OFFSET = 0x016,   /* SGL Offset Invalid */
	NVME_SC_CMD_INTERRUPTED = 0x021,      /* Command Interrupted: the host retries (no DNR) */
	NVME_SC_LBA_RANGE = 0x080,
	NVME_SC_INVALID_LOG_PAGE = 0x109,
	NVME_SC_FEATURE_NOT_CHANGEABLE = 0x10e,
	NVME_SC_ASYNC_LIMIT = 0x105,
	NVME_SC_CONNECT_INCOMPATIBLE = 0x180,  /* Connect Incompatible Format */
	NVME_SC_CONNECT_CTRL_BUSY = 0x181,
	NVME_SC_CONNECT_INVALID_PARAM = 0x182,
	NVME_SC_CONNECT_INVALID_HOST = 0x184,
};
#define NVME_STATUS_DNR 0x4000   /* in the >> 1 space, as the kernel writes it */

/* Opcodes. */
enum {
	/* admin */
	NVME_ADMIN_GET_LOG_PAGE = 0x02,
	NVME_ADMIN_IDENTIFY = 0x06,
	NVME_ADMIN_ABORT = 0x08,
	NVME_ADMIN_SET_FEATURES = 0x09,
	NVME_ADMIN_GET_FEATURES = 0x0a,
	NVME_ADMIN_ASYNC_EVENT = 0x0c,
	NVME_ADMIN_KEEP_ALIVE = 0x18,
	/* I/O (NVM command set) */
	NVME_CMD_FLUSH = 0x00,
	NVME_CMD_WRITE = 0x01,
	NVME_CMD_READ = 0x02,
	/* fabrics */
	NVME_FABRICS_COMMAND = 0x7f,
};

enum {
	NVMF_FCTYPE_PROP_SET = 0x00,
	NVMF_FCTYPE_CONNECT = 0x01,
	NVMF_FCTYPE_PROP_GET = 0x04,
};

/* Connect command (SQE) fields. */
struct nvmf_connect_cmd {
	uint8_t opcode, rsvd1;
	uint16_t cid;
	uint8_t fctype;
	uint8_t rsvd2[19];
	struct nvme_sgl sgl;     /* 24 */
	uint16_t recfmt;         /* 40 */
	uint16_t qid;            /* 42 */
	uint16_t sqsize;         /* 44, 0's based */
	uint8_t cattr;           /* 46 */
	uint8_t rsvd3;
	uint32_t kato;           /* 48, milliseconds */
	uint8_t rsvd4[12];
} __attribute__((packed));

/* Property Get / Set. */
struct nvmf_prop_cmd {
	uint8_t opcode, rsvd1;
	uint16_t cid;
	uint8_t fctype;
	uint8_t rsvd2[35];
	uint8_t attrib;          /* 40: bits 2:0 size, 0 = 4 bytes, 1 = 8 bytes */
	uint8_t rsvd3[3];
	uint32_t offset;         /* 44 */
	uint64_t value;          /* 48 (set) */
	uint8_t rsvd4[8];
} __attribute__((packed));

/* Connect data (1024 bytes, host -> controller).  An NQN is at most 223 bytes (NVMe Base, NVMe
 * Qualified Names), NUL-terminated in its 256-byte field. */
#define NVMF_NQN_MAX 223
#define NVMF_CONNECT_DATA_CNTLID 16      /* byte offsets, for a Connect Invalid Parameters' IPO */
#define NVMF_CONNECT_DATA_SUBNQN 256
#define NVMF_CONNECT_DATA_HOSTNQN 512
#define NVMF_CONNECT_CMD_QID 42
#define NVMF_CONNECT_CMD_SQSIZE 44

struct nvmf_connect_data {
	uint8_t hostid[16];
	uint16_t cntlid;
	uint8_t rsvd4[238];
	char subsysnqn[256];
	char hostnqn[256];
	uint8_t rsvd5[256];
} __attribute__((packed));

_Static_assert(sizeof(struct nvmf_connect_cmd) == 64, "connect SQE");
_Static_assert(sizeof(struct nvmf_prop_cmd) == 64, "property SQE");
_Static_assert(sizeof(struct nvmf_connect_data) == 1024, "connect data");

/* Controller properties (the registers of NVMe over PCIe). */
enum {
	NVME_REG_CAP = 0x00,
	NVME_REG_VS = 0x08,
	NVME_REG_CC = 0x14,
	NVME_REG_CSTS = 0x1c,
};
#define NVME_CC_EN 0x1
#define NVME_CC_SHN(cc) (((cc) >> 14) & 3)
#define NVME_CSTS_RDY 0x1
#define NVME_CSTS_CFS 0x2      /* controller fatal status */
#define NVME_CSTS_SHST_CMPLT (2u << 2)

/* Identify CNS values. */
enum {
	NVME_ID_CNS_NS = 0x00,
	NVME_ID_CNS_CTRL = 0x01,
	NVME_ID_CNS_NS_ACTIVE_LIST = 0x02,
	NVME_ID_CNS_NS_DESC_LIST = 0x03,
	NVME_ID_CNS_CS_CTRL = 0x06,      /* I/O command set specific controller, CSI in CDW11 */
};
#define NVME_CSI_NVM 0

/* Log pages. */
enum {
	NVME_LOG_ERROR = 0x01,
	NVME_LOG_SMART = 0x02,
	NVME_LOG_FW_SLOT = 0x03,
	NVME_LOG_CHANGED_NS = 0x04,
	NVME_LOG_DISC = 0x70,
};

/* Features. */
enum {
	NVME_FEAT_NUM_QUEUES = 0x07,
	NVME_FEAT_ASYNC_EVENT = 0x0b,
	NVME_FEAT_KATO = 0x0f,
};

#define NVME_DISC_SUBSYS_NAME "nqn.2014-08.org.nvmexpress.discovery"

/* Discovery log page entry fields (offsets in a 1024-byte entry). */
#define NVMF_TRTYPE_RDMA 1
#define NVMF_ADRFAM_IPV4 1
#define NVMF_ADRFAM_IPV6 2
#define NVME_NQN_NVME 2              /* subtype: an NVM subsystem */
#define NVMF_RDMA_QPTYPE_CONNECTED 1
#define NVMF_RDMA_PRTYPE_NOT_SPECIFIED 1
#define NVMF_RDMA_CMS_RDMA_CM 1

/* Little-endian helpers on byte buffers. */
static inline void put_le16(void *p, uint16_t v) { v = htole16(v); memcpy(p, &v, 2); }
static inline void put_le32(void *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }
static inline void put_le64(void *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }
static inline uint32_t get_le24(const uint8_t *p) { return p[0] | p[1] << 8 | (uint32_t)p[2] << 16; }
static inline uint32_t get_le32b(const uint8_t *p)
{
	return p[0] | p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

#endif
