# s1_submodule_gitdir_in_skipped_store.sh of red-team review 48b, run inside the sandbox (MARK: the marker's path):
# a full repository at .git/modules/lib/info/z (lib: objects and refs, no HEAD) named by a submodule.
set -e
export GIT_CONFIG_NOSYSTEM=1 HOME=/tmp/h; mkdir -p $HOME; git config --global user.name a; git config --global user.email a@b
git init -q /tmp/src && git -C /tmp/src commit --allow-empty -qm x && sha=$(git -C /tmp/src rev-parse HEAD)
mkdir -p .git/modules/lib/objects .git/modules/lib/refs
git clone -q --bare /tmp/src .git/modules/lib/info/z
git config -f .git/modules/lib/info/z/config core.bare false
git config -f .git/modules/lib/info/z/config core.fsmonitor "touch MARK; false"
printf '#!/bin/sh\ntouch MARK\n' > .git/modules/lib/info/z/hooks/post-checkout; chmod +x .git/modules/lib/info/z/hooks/post-checkout
git config -f .gitmodules submodule.lib/info/z.path z
git config -f .gitmodules submodule.lib/info/z.url ./nowhere
git update-index --add --cacheinfo 160000,$sha,z
git add .gitmodules
echo planted
