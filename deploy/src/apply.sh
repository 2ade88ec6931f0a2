#!/bin/sh
# Installs one host's rendered files, staged in $1 by `isu-deploy apply`, and starts or
# restarts only what changed. A second run with the same files changes nothing and says so.
# The actions a change needs are written down before anything is installed and forgotten only
# once done, so a run cut short (a failed restart, a dropped connection) is finished by the
# next one. ISU_DEPLOY_ROOT (default: /), ISU_DEPLOY_SYSTEMCTL (default: systemctl) and
# ISU_DEPLOY_OWNER (uid:gid, default 0:0) exist for tests.
set -eu
stage=$1
root=${ISU_DEPLOY_ROOT:-}
systemctl=${ISU_DEPLOY_SYSTEMCTL:-systemctl}
owner=${ISU_DEPLOY_OWNER:-0:0}
host=$(cat "$stage/.isu-deploy/host")
pending="$root/var/lib/isu-deploy/pending"
cd "$stage"

# Whatever else holds the cluster's ports goes first (e.g. the distribution's nginx).
while read -r unit; do
    if $systemctl is-enabled --quiet "$unit" 2>/dev/null || $systemctl is-active --quiet "$unit" 2>/dev/null; then
        $systemctl disable --now "$unit"
        echo "$host: stopped and disabled $unit (the cluster replaces it)"
    fi
done <.isu-deploy/replaces

mode_of() { awk -v p="$1" '$1 == p { print $2 }' .isu-deploy/modes; }

# 1. What differs (content, mode or owner), and the actions it needs, written down first.
changed=$(mktemp)
trap 'rm -f "$changed"' EXIT
while read -r path mode; do
    target="$root/$path"
    if [ -f "$target" ] && cmp -s "$path" "$target" \
        && [ "$(stat -c '%a %u:%g' "$target")" = "$mode $owner" ]; then
        continue
    fi
    echo "$path" >>"$changed"
done <.isu-deploy/modes
mkdir -p "$(dirname "$pending")"
if [ -s "$changed" ]; then
    grep -q '^etc/systemd/system/' "$changed" && echo "daemon-reload -" >>"$pending"
    while read -r path; do
        awk -v p="$path" '$1 == p { print $2, $3 }' .isu-deploy/actions
    done <"$changed" >>"$pending"
    echo "start -" >>"$pending"
fi

# 2. Install: root-owned, the rendered mode, written beside and renamed (a running binary is
# replaced, never overwritten).
while read -r path; do
    target="$root/$path"
    mkdir -p "$(dirname "$target")"
    install -o "${owner%:*}" -g "${owner#*:}" -m "$(mode_of "$path")" "$path" "$target.isu-deploy-new"
    mv -f "$target.isu-deploy-new" "$target"
    echo "$host: installed /$path"
done <"$changed"

# 3. The actions owed (this run's and any an interrupted run left).
if [ ! -s "$pending" ]; then
    # Nothing new: only make sure everything runs (a stopped unit is started).
    started=0
    while read -r unit; do
        if ! $systemctl is-active --quiet "$unit"; then
            $systemctl enable --now "$unit"
            echo "$host: started $unit (it was not running)"
            started=1
        fi
    done <.isu-deploy/units
    [ "$started" = 1 ] || echo "$host: unchanged"
    rm -f "$pending"
    exit 0
fi
if grep -q '^daemon-reload ' "$pending"; then
    $systemctl daemon-reload
fi
# A unit that was not running is started with what was just installed: no restart after.
fresh=""
while read -r unit; do
    if ! $systemctl is-active --quiet "$unit"; then
        fresh="$fresh $unit "
        $systemctl enable --now "$unit"
        echo "$host: started $unit"
    else
        $systemctl enable --quiet "$unit"
    fi
done <.isu-deploy/units
# One action per unit, the strongest asked for (restart over reload).
awk '$1 == "restart" || $1 == "reload" { print $2 }' "$pending" | sort -u | while read -r unit; do
    case "$fresh" in *" $unit "*) continue ;; esac
    if grep -qx "restart $unit" "$pending"; then
        $systemctl restart "$unit"
        echo "$host: restarted $unit"
    else
        $systemctl reload "$unit"
        echo "$host: reloaded $unit"
    fi
done
rm -f "$pending"
