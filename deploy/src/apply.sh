#!/bin/sh
# Installs one host's rendered files, staged in $1 by `isu-deploy apply`, and starts or
# restarts only what changed. A second run with the same files changes nothing and says so.
# ISU_DEPLOY_ROOT (default: /) and ISU_DEPLOY_SYSTEMCTL (default: systemctl) exist for tests.
set -eu
stage=$1
root=${ISU_DEPLOY_ROOT:-}
systemctl=${ISU_DEPLOY_SYSTEMCTL:-systemctl}
host=$(cat "$stage/.isu-deploy/host")

changed_list=$(mktemp)
trap 'rm -f "$changed_list"' EXIT
cd "$stage"
find . -path ./.isu-deploy -prune -o -type f -print | sort | while read -r file; do
    path=${file#./}
    target="$root/$path"
    if [ -f "$target" ] && cmp -s "$file" "$target"; then
        mode=$(stat -c %a "$file")
        [ "$(stat -c %a "$target")" = "$mode" ] && continue
    fi
    mkdir -p "$(dirname "$target")"
    # Written beside, then renamed: a running binary is replaced, never overwritten.
    cp -p "$file" "$target.isu-deploy-new"
    mv -f "$target.isu-deploy-new" "$target"
    echo "$host: installed /$path"
    echo "$path" >>"$changed_list"
done

if [ ! -s "$changed_list" ]; then
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
    exit 0
fi

if grep -q '^etc/systemd/system/' "$changed_list"; then
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
actions=$(while read -r path; do
    awk -v p="$path" '$1 == p { print $2, $3 }' .isu-deploy/actions
done <"$changed_list" | sort -u)
echo "$actions" | awk 'NF == 2 { print $2 }' | sort -u | while read -r unit; do
    case "$fresh" in *" $unit "*) continue ;; esac
    if echo "$actions" | grep -qx "restart $unit"; then
        $systemctl restart "$unit"
        echo "$host: restarted $unit"
    else
        $systemctl reload "$unit"
        echo "$host: reloaded $unit"
    fi
done
