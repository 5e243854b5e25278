<?php
// Blocks in a call that does not return by itself, as production code does: curl to an
// API that never answers (no curl timeout), a socket read, a child process. PHP's own
// time limit cannot end these; the caller names the kind and the silent server.
function hang(string $kind, string $target): string
{
    switch ($kind) {
        case 'curl':
            $ch = curl_init("http://$target/");
            curl_setopt($ch, CURLOPT_RETURNTRANSFER, true);
            $out = curl_exec($ch);
            return 'curl returned ' . var_export($out, true);
        case 'socket':
            $s = fsockopen(...explode(':', $target));
            stream_set_timeout($s, 600);
            return 'read returned ' . var_export(fread($s, 100), true);
        case 'child':
            system('sleep 30');
            return 'child returned';
    }
    return 'unknown kind';
}
