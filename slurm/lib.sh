# slurm/lib.sh - sourced by the sbatch scripts, from the checkout it belongs to: enter that
# checkout, load DBA3C_MODULES, activate the Python environment. Each script finds this file
# first (DBA3C_HOME, else the checkout it was submitted from: sbatch runs a copy of the
# script, and Slurm records the submitted path; else the submission directory).

dba3c_home=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ ! -d $dba3c_home/dba3c ]]; then
    echo "error: $dba3c_home is not a dba3c checkout (set DBA3C_HOME to one)" >&2
    exit 2
fi
cd "$dba3c_home" || exit 2

if [[ -n ${DBA3C_MODULES:-} ]]; then
    for m in $DBA3C_MODULES; do
        module load "$m" || { echo "error: module load $m failed" >&2; exit 1; }
    done
fi
VENV=${DBA3C_VENV:-$dba3c_home/.venv}
if [[ -f $VENV/bin/activate ]]; then
    # shellcheck disable=SC1091
    source "$VENV/bin/activate"
elif [[ -n ${DBA3C_VENV:-} ]]; then
    echo "error: DBA3C_VENV=$DBA3C_VENV has no bin/activate" >&2
    exit 2
fi
