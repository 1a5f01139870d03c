# Sourced by the bench/*.sh scripts; sourcing it runs nothing, so --help works without a build.
#
# The command line, declared once per script, then parsed:
#   bench_opt NAME VAR DEFAULT   NAME takes a value, stored in VAR (DEFAULT until given); an empty
#                                value is taken only where DEFAULT is empty (it means the default)
#   bench_flag NAME VAR VALUE    NAME takes no value: VAR=VALUE when given (VAR starts empty)
#   bench_arg VAR [DEFAULT]      the next positional argument, in VAR; optional with a DEFAULT (which
#                                an empty one also means)
#   bench_parse "USAGE" "$@"     USAGE: what follows "usage: SCRIPT " (the synopsis)
# Options and positional arguments may come in any order ("--" ends the options); values may hold
# spaces. An unknown option, a missing value or a wrong number of arguments prints the usage on
# stderr and exits 2; -h or --help prints the usage and the script's header comment and exits 0.
#
# bench_env: the built trainer ($trainer), Open MPI on loopback (root allowed when run as root, as
# in CI containers), and a scratch directory removed on exit ($dir).

declare -gA _bench_var=() _bench_default=() _bench_flag=()
_bench_args=() _bench_required=0 _bench_usage=""

bench_opt() {
  _bench_var[$1]=$2 _bench_default[$1]=$3
  printf -v "$2" '%s' "$3"
}
bench_flag() {
  _bench_var[$1]=$2 _bench_flag[$1]=$3
  printf -v "$2" '%s' ""
}
bench_arg() {
  _bench_args+=("$1")
  if (($# > 1)); then printf -v "$1" '%s' "$2"; else _bench_required=${#_bench_args[@]}; fi
}
bench_usage_error() {  # bench_usage_error MESSAGE: MESSAGE and the usage on stderr, exit 2
  echo "$(basename "$0"): $1" >&2
  echo "$_bench_usage" >&2
  exit 2
}
bench_parse() {
  _bench_usage="usage: $0 $1"
  shift
  local -a _bench_pos=()
  local _bench_i
  while (($#)); do
    case $1 in
      -h | --help)
        echo "$_bench_usage"
        awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
        exit 0 ;;
      --) shift; _bench_pos+=("$@"); break ;;
      -?*)
        [[ -n ${_bench_var[$1]+set} ]] || bench_usage_error "unknown option '$1'"
        if [[ -n ${_bench_flag[$1]+set} ]]; then
          printf -v "${_bench_var[$1]}" '%s' "${_bench_flag[$1]}"
          shift
        else
          (($# >= 2)) || bench_usage_error "$1 needs a value"
          [[ -n $2 || -z ${_bench_default[$1]} ]] || bench_usage_error "$1 needs a value, not ''"
          printf -v "${_bench_var[$1]}" '%s' "$2"
          shift 2
        fi ;;
      *) _bench_pos+=("$1"); shift ;;
    esac
  done
  ((${#_bench_pos[@]} <= ${#_bench_args[@]})) ||
    bench_usage_error "unexpected argument '${_bench_pos[${#_bench_args[@]}]}'"
  ((${#_bench_pos[@]} >= _bench_required)) || bench_usage_error "missing argument(s)"
  for ((_bench_i = 0; _bench_i < ${#_bench_pos[@]}; _bench_i++)); do  # an empty optional one: its default
    [[ -z ${_bench_pos[_bench_i]} ]] && ((_bench_i >= _bench_required)) ||
      printf -v "${_bench_args[_bench_i]}" '%s' "${_bench_pos[_bench_i]}"
  done
}

bench_env() {
  trainer=build/release/mpi_trainer
  [[ -x $trainer ]] || { echo "build first: launch/build.sh release" >&2; exit 1; }
  export OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_tcp_if_include=lo
  [[ $(id -u) -ne 0 ]] || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
}

# bench_trainer_runs RUNS JOBS PREFIX FLAGS...: each line of the file RUNS, "NAME SEED ARGS...", is
# one `$trainer train ARGS FLAGS --metrics $out/NAME.SEED.jsonl` (its output in $out/NAME.SEED.txt),
# JOBS at a time; a run whose metrics already end with a summary is not run again (a measurement
# can be resumed or given more seeds). PREFIX names the script in its messages.
bench_trainer_runs() {
  local runs=$1 jobs=$2
  export _bench_prefix=$3 trainer out
  shift 3
  export -f _bench_run_one
  xargs -P "$jobs" -L 1 bash -c '_bench_run_one "$@" '"${*@Q}" _ <"$runs"
}
_bench_run_one() {
  local name=$1 seed=$2
  shift 2
  [[ -s $out/$name.$seed.jsonl && $(tail -1 "$out/$name.$seed.jsonl") == *'"summary"'* ]] && return 0
  OMP_WAIT_POLICY=passive "$trainer" train "$@" --metrics "$out/$name.$seed.jsonl" >"$out/$name.$seed.txt" 2>&1 ||
    { echo "$_bench_prefix: $name $seed failed:" >&2; tail -5 "$out/$name.$seed.txt" >&2; return 1; }
  echo "  done $name $seed"
}
