# sm/states.awk: every state is named once, in its machine's table of states (sm/*.rl); this
# writes from those tables everything else that names a state.
# Run as: awk -v out=WHAT -f sm/states.awk sm/cm_id.rl sm/accept.rl ...  (in enum qsm_machine order)
#   out=enum     include/qsm/states.h:  the public enums, numbered in table order (the ABI)
#   out=actions  sm/state_actions.rl:   each state's arrival action, which the .rl includes
#   out=tables   sm/state_tables.h:     QSM_SM_<M>_STATES, the names and facts of struct qsm_sm
# A table, inside the .rl's %%{ }%% (Ragel comments, so Ragel skips it), one line per state:
#   # states qsm_device_state QSM_DEVICE_ "A device of the ctx's registry."
#   # state IN_USE    -           "queues use it; its sentinel id hears DEVICE_REMOVAL"
#   # state REMOVING  retiring    "removed: its queues take their DEVICE_REMOVAL edges"
# The first state is the start state, the last the final one.  Facts, comma-separated or `-`:
#   timeout=connect_ms  the struct qsm_timeouts field armed on arrival (QSM_STEP_CONNECT)
#   after_cm            that timer never fires before the fabric's CM ends the attempt by
#                       itself (its bound, and a quarter more): it never races the CM
#   drains              the drain marker is posted: new work requests are refused
#   teardown=reject     a ctx torn down here rejects the pending request (QSM_TEARDOWN_REJECT)
#   retiring            on its way out: takes no new user

function fail(msg) {
	printf "%s:%d: %s\n", FILENAME, FNR, msg > "/dev/stderr"
	failed = 1
	exit 1
}

# the quoted text at the end of the line
function quoted(line) {
	if (!match(line, /"[^"]*"[ \t]*$/))
		fail("a table line ends with its meaning in double quotes")
	line = substr(line, RSTART + 1, RLENGTH - 1)
	sub(/"[ \t]*$/, "", line)
	return line
}

FNR == 1 {
	file = FILENAME
	sub(/.*\//, "", file)
	file = "sm/" file
	m = ""
}

/^[ \t]*machine[ \t]+[a-z_]+[ \t]*;/ && m == "" {
	m = $2
	sub(/;.*/, "", m)
	machines[++nm] = m
	mfile[m] = file
	nstates[m] = 0
}

/^[ \t]*#[ \t]*states[ \t]/ {
	if (m == "")
		fail("a table of states before the machine statement")
	if ($3 !~ /^qsm_[a-z_]+_state$/ || $4 !~ /^QSM_[A-Z]+_$/)
		fail("expected: # states qsm_x_state QSM_X_ \"what the machine is\"")
	tag[m] = $3
	prefix[m] = $4
	doc[m] = quoted($0)
	next
}

/^[ \t]*#[ \t]*state[ \t]/ {
	if (!(m in tag))
		fail("a state before its table's `# states` line")
	name = $3
	facts = $4
	if (name !~ /^[A-Z][A-Z0-9_]*$/)
		fail("a state is named in UPPER_CASE: " name)
	if ((m, name) in seen)
		fail("state " name " named twice")
	seen[m, name] = 1
	n = nstates[m]++
	sname[m, n] = name
	smeaning[m, n] = quoted($0)
	init = ""
	if (facts != "-") {
		k = split(facts, f, ",")
		for (i = 1; i <= k; i++) {
			if (f[i] ~ /^timeout=[a-z]+_ms$/) {
				v = toupper(substr(f[i], 9))
				sub(/_MS$/, "", v)
				init = init ", .timeout = QSM_STEP_" v
			} else if (f[i] == "teardown=reject") {
				init = init ", .teardown = QSM_TEARDOWN_REJECT"
			} else if (f[i] == "drains" || f[i] == "retiring" || f[i] == "after_cm") {
				init = init ", ." f[i] " = true"
			} else {
				fail("unknown fact " f[i] " (timeout=x_ms, after_cm, drains, teardown=reject, retiring, or -)")
			}
		}
	}
	sfacts[m, n] = init == "" ? "{ 0 }" : "{ " substr(init, 3) " }"
}

function pad(s, w) {
	return sprintf("%-" w "s", s)
}

function width(m,    i, w) {
	w = 0
	for (i = 0; i < nstates[m]; i++)
		if (length(sname[m, i]) > w)
			w = length(sname[m, i])
	return w
}

END {
	if (failed)
		exit 1
	for (j = 1; j <= nm; j++)
		if (nstates[machines[j]] < 2) {
			printf "%s: no table of states (# states ..., # state ...)\n", mfile[machines[j]] > "/dev/stderr"
			exit 1
		}
	if (out == "enum")
		write_enum()
	else if (out == "actions")
		write_actions()
	else if (out == "tables")
		write_tables()
	else {
		print "states.awk: out=enum, out=actions or out=tables" > "/dev/stderr"
		exit 1
	}
}

# a generated C header's first lines: what it is, in two, and its guard
function c_open(what, guard) {
	printf "/* %s,\n * written by sm/states.awk from the tables of states in sm/\\*.rl; do not edit. */\n", what
	printf "#ifndef %s\n#define %s\n", guard, guard
}

function write_enum(    j, m, i, w) {
	c_open("rdma-qsm: every machine's states, numbered in the order its table lists them (the ABI);\n" \
	       " * included by <qsm/machine.h>", "QSM_STATES_H")
	for (j = 1; j <= nm; j++) {
		m = machines[j]
		w = width(m) + length(prefix[m]) + length(nstates[m]) + 4
		printf "\n/* %s (%s). */\n", doc[m], mfile[m]
		printf "enum %s {\n", tag[m]
		for (i = 0; i < nstates[m]; i++)
			printf "\t%s /* %s */\n", pad(prefix[m] sname[m, i] " = " i ",", w), smeaning[m, i]
		print "};"
		printf "#define %sSTATE_COUNT %d\n", prefix[m], nstates[m]
	}
	print "\n#endif"
}

function write_actions(    j, m, i, w) {
	print "# sm/state_actions.rl: each state's arrival action, written by sm/states.awk from the tables of"
	print "# states in sm/*.rl; do not edit.  Each state names itself on arrival (>~NAME in the chart),"
	print "# so names survive minimisation; a machine's .rl includes its own block."
	for (j = 1; j <= nm; j++) {
		m = machines[j]
		w = width(m)
		printf "\n%%%%{\n\tmachine %s;\n", m
		for (i = 0; i < nstates[m]; i++)
			printf "\taction %s { QSM_SM_TO(%s%s); }\n", pad(sname[m, i], w), prefix[m], sname[m, i]
		print "}%%"
	}
}

function write_tables(    j, m, i, w) {
	c_open("rdma-qsm internal: each machine's state names and facts for its struct qsm_sm (src/sm.h)",
	       "QSM_SM_STATE_TABLES_H")
	for (j = 1; j <= nm; j++) {
		m = machines[j]
		w = width(m) + length(prefix[m]) + 2
		printf "\n/* %s: the first state starts, the last is final */\n", mfile[m]
		printf "#define QSM_SM_%s_STATES \\\n", toupper(m)
		printf "\t.nstates = %sSTATE_COUNT, \\\n", prefix[m]
		printf "\t.start_state = %s%s, \\\n", prefix[m], sname[m, 0]
		printf "\t.final_state = %s%s, \\\n", prefix[m], sname[m, nstates[m] - 1]
		printf "\t.state_names = (const char *const[%sSTATE_COUNT]){ \\\n", prefix[m]
		for (i = 0; i < nstates[m]; i++)
			printf "\t\t%s = \"%s\", \\\n", pad("[" prefix[m] sname[m, i] "]", w), sname[m, i]
		print "\t}, \\"
		printf "\t.facts = (const struct qsm_state_facts[%sSTATE_COUNT]){ \\\n", prefix[m]
		for (i = 0; i < nstates[m]; i++)
			printf "\t\t%s = %s, \\\n", pad("[" prefix[m] sname[m, i] "]", w), sfacts[m, i]
		print "\t}"
	}
	print "\n#endif"
}
