# shellcheck shell=bash
# Functions shared by scripts/clickhouse-test-server and
# scripts/clickhouse-test-cluster, which source this file: installing
# Debian's clickhouse-server, free ports, a server's configuration in its own
# folder, starting, checking and stopping it.

log() { echo "${log_name:-clickhouse-test}: $*" >&2; }

# server_cmd prints the command that runs the server.
server_cmd() {
	if [ -x /usr/sbin/clickhouse-server ]; then
		echo /usr/sbin/clickhouse-server
	elif command -v clickhouse-server >/dev/null 2>&1; then
		command -v clickhouse-server
	elif command -v clickhouse >/dev/null 2>&1; then
		echo "$(command -v clickhouse) server"
	else
		return 1
	fi
}

# apt_install PACKAGE installs a Debian package as root, updating the
# package lists only when the first try fails.
apt_install() {
	if [ "$(id -u)" != 0 ]; then
		log "$1 is not installed; install Debian's $1 package (apt-get install $1)"
		return 1
	fi
	log "installing $1 with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -q "$1" >&2; then
		apt-get update -q >&2
		apt-get install -y -q "$1" >&2
	fi
}

install_server() {
	if server_cmd >/dev/null; then
		return 0
	fi
	apt_install clickhouse-server || return 1
	server_cmd >/dev/null
}

# port_free reports whether nothing listens on 127.0.0.1:$1.
port_free() {
	! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# free_port prints a port no one listens on and not in $taken (a
# space-separated list of ports already chosen), below the kernel's
# ephemeral range when it can: ports there are also the local ends of
# outgoing connections (a test run opens many), which a listener cannot
# bind.
free_port() {
	local p tries=0 lo=20000 span=40000 ephemeral
	if read -r ephemeral _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null && [ "$ephemeral" -gt $((lo + 1000)) ]; then
		span=$((ephemeral - lo))
	fi
	while [ $tries -lt 200 ]; do
		p=$((lo + RANDOM % span))
		if port_free "$p" && [[ " ${taken:-} " != *" $p "* ]]; then
			echo "$p"
			return 0
		fi
		tries=$((tries + 1))
	done
	log "no free port found"
	return 1
}

# write_config DIR TCP HTTP [INTERSERVER] writes the server's configuration
# into DIR/etc: the packaged config and users (or minimal ones), overridden
# by DIR/etc/config.d/sluice.xml with DIR's paths and the ports. Replicas
# fetch parts from each other over the interserver port: a single server
# has none.
write_config() {
	local d=$1 tcp=$2 http=$3 inter=${4:-} root=yandex interserver
	mkdir -p "$d/etc/config.d" "$d/data/tmp" "$d/data/user_files" "$d/data/format_schemas" "$d/log"
	if [ -f /etc/clickhouse-server/config.xml ]; then
		cp /etc/clickhouse-server/config.xml "$d/etc/config.xml"
		if grep -q '<clickhouse>' "$d/etc/config.xml"; then root=clickhouse; fi
	else
		printf '<?xml version="1.0"?>\n<%s>\n</%s>\n' "$root" "$root" >"$d/etc/config.xml"
	fi
	if [ -f /etc/clickhouse-server/users.xml ]; then
		cp /etc/clickhouse-server/users.xml "$d/etc/users.xml"
	else
		cat >"$d/etc/users.xml" <<EOT
<?xml version="1.0"?>
<$root>
    <profiles><default/></profiles>
    <users><default><password/><networks><ip>::/0</ip></networks><profile>default</profile><quota>default</quota></default></users>
    <quotas><default/></quotas>
</$root>
EOT
	fi
	if [ -n "$inter" ]; then
		interserver="<interserver_http_port>$inter</interserver_http_port>
    <interserver_http_host>127.0.0.1</interserver_http_host>"
	else
		interserver='<interserver_http_port remove="1"/>'
	fi
	cat >"$d/etc/config.d/sluice.xml" <<EOT
<?xml version="1.0"?>
<$root>
    <logger replace="1">
        <level>information</level>
        <log>$d/log/server.log</log>
        <errorlog>$d/log/server.err.log</errorlog>
        <size>100M</size>
        <count>2</count>
    </logger>
    <listen_host replace="1">127.0.0.1</listen_host>
    <tcp_port>$tcp</tcp_port>
    <http_port>$http</http_port>
    $interserver
    <https_port remove="1"/>
    <tcp_port_secure remove="1"/>
    <mysql_port remove="1"/>
    <postgresql_port remove="1"/>
    <path>$d/data/</path>
    <tmp_path>$d/data/tmp/</tmp_path>
    <user_files_path>$d/data/user_files/</user_files_path>
    <format_schema_path>$d/data/format_schemas/</format_schema_path>
    <users_config>$d/etc/users.xml</users_config>
    <mlock_executable>false</mlock_executable>
    <kafka><auto_offset_reset>smallest</auto_offset_reset></kafka>
</$root>
EOT
	printf '%s %s %s\n' "$tcp" "$http" "$inter" >"$d/ports"
}

# config_root DIR prints the root element of DIR's server config (yandex on
# 18.16, clickhouse on current releases).
config_root() {
	if grep -q '<clickhouse>' "$1/etc/config.xml"; then echo clickhouse; else echo yandex; fi
}

# answers HTTP reports whether the server answers /ping on port HTTP.
answers() {
	local reply
	reply=$( (exec 3<>"/dev/tcp/127.0.0.1/$1" && printf 'GET /ping HTTP/1.0\r\n\r\n' >&3 && cat <&3) 2>/dev/null || true)
	[[ $reply == *"Ok."* ]]
}

# http_query HTTP QUERY prints the body of the server's answer to QUERY (URL
# encoded by the caller: no spaces), or fails.
http_query() {
	local reply
	reply=$( (exec 3<>"/dev/tcp/127.0.0.1/$1" && printf 'GET /?query=%s HTTP/1.0\r\n\r\n' "$2" >&3 && cat <&3) 2>/dev/null) || return 1
	[[ $reply == "HTTP/1."?" 200"* ]] || return 1
	printf '%s\n' "${reply#*$'\r\n\r\n'}"
}

# alive PID reports whether the process runs (a zombie does not).
alive() {
	kill -0 "$1" 2>/dev/null || return 1
	[ -r "/proc/$1/stat" ] || return 0
	local state
	state=$(sed 's/^.*) //' "/proc/$1/stat" | cut -d' ' -f1)
	[ "$state" != Z ]
}

# ours DIR PID reports whether PID runs the server of DIR (DIR absolute, as
# start wrote it). The kernel gives a dead server's PID to a new process or
# thread sooner or later (PIDs wrap at /proc/sys/kernel/pid_max, 32768 on
# small machines, and every server runs dozens of threads): a signal sent
# to a stale PID could stop another test's server.
ours() {
	local cmdline
	cmdline=$(tr '\0' ' ' <"/proc/$2/cmdline" 2>/dev/null) || return 1
	[[ $cmdline == *"--config-file=$1/etc/config.xml"* ]]
}

running() {
	local pid
	[ -f "$1/server.pid" ] || return 1
	pid=$(cat "$1/server.pid")
	alive "$pid" && ours "$1" "$pid"
}

tail_logs() {
	local f
	for f in "$1/log/stdout.log" "$1/log/server.err.log" "$1/log/server.log"; do
		if [ -s "$f" ]; then
			echo "--- $f" >&2
			tail -n 30 "$f" >&2
		fi
	done
}

# spawn_server DIR starts the server on DIR's config without waiting.
spawn_server() {
	local d=$1 server
	server=$(server_cmd)
	# The server runs as the invoking user (root included) on files that user
	# owns, so it needs no user switch. setsid puts it in its own session, so
	# that signals to the caller's process group do not reach it.
	# shellcheck disable=SC2086 # $server may be "clickhouse server"
	(cd "$d" && exec setsid $server --config-file="$d/etc/config.xml" --pid-file="$d/clickhouse.pid" \
		>"$d/log/stdout.log" 2>&1 </dev/null) &
	echo "$!" >"$d/server.pid"
}

# wait_server DIR waits up to 60 s until DIR's server answers.
wait_server() {
	local d=$1 http pid i
	read -r _ http _ <"$d/ports"
	pid=$(cat "$d/server.pid")
	for i in $(seq 1 600); do
		answers "$http" && return 0
		alive "$pid" || return 1
		sleep 0.1
	done
	return 1
}

# launch DIR starts the server on DIR's config and waits until it answers.
launch() {
	spawn_server "$1"
	wait_server "$1"
}

stop_server() {
	local d=$1 sig=$2 pid i
	running "$d" || return 0
	pid=$(cat "$d/server.pid")
	kill "-$sig" "$pid" 2>/dev/null || return 0
	for i in $(seq 1 300); do
		running "$d" || return 0
		sleep 0.05
	done
	running "$d" && kill -KILL "$pid" 2>/dev/null
	return 0
}
