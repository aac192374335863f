# Sourced by the device check scripts (device_torch_check.sh,
# device_transformers_check.sh): wheel_venv OUT WHEEL makes a fresh venv at
# OUT/venv in which the machine's site-packages (torch) stay visible (a
# parent.pth, also when python3 is itself a venv), installs the kvgen wheel
# WHEEL into it without dependencies or an index, and sets V (the venv) and
# site (its purelib directory). Returns non-zero when a step fails.
wheel_venv() {
  rm -rf "$1" && mkdir -p "$1" || return 1
  V="$1/venv"
  python3 -m venv "$V" || return 1
  site="$("$V/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || return 1
  python3 -c 'import site; print("\n".join(site.getsitepackages()))' \
    > "$site/parent.pth" || return 1
  "$V/bin/pip" install --no-deps --no-index "$2" | tail -1
  return "${PIPESTATUS[0]}"
}
