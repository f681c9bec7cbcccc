# sm/max_actions.awk: the build refuses a .rl edge with more actions than the runtime holds.
# Run as: awk -v max=N -f sm/max_actions.awk file.rl  (N = QSM_EDGE_MAX_ACTIONS)
# An edge is the text between one `->` and the next inside `main := ( ... );`.
{ sub(/#.*/, "") }
/main[ \t]*:=/ { in_main = 1 }
in_main { text = text " " $0 }
in_main && /^[ \t]*\);/ { in_main = 0 }
END {
	n = split(text, edges, "->")
	for (i = 1; i < n; i++) {
		acts = gsub(/@[a-z_]+/, "&", edges[i])
		if (acts > max) {
			e = edges[i]
			gsub(/[ \t]+/, " ", e)
			printf "%s: an edge has %d actions, the runtime holds %d (QSM_EDGE_MAX_ACTIONS):%s\n", \
				FILENAME, acts, max, e > "/dev/stderr"
			bad = 1
		}
	}
	exit bad
}
