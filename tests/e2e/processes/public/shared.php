<?php
// The shared table from whichever process runs the request: ?op=put|get|incr|add|touch|forget|count|flush.
$key = $_GET['key'] ?? 'k';
$out = ['pid' => getmypid()];
switch ($_GET['op'] ?? 'get') {
    case 'put':
        $out['ok'] = php_worker_shared_put($key, json_decode($_GET['value'] ?? 'null', true), (int) ($_GET['ttl'] ?? 0));
        break;
    case 'add':
        $out['ok'] = php_worker_shared_add($key, $_GET['value'] ?? '');
        break;
    case 'incr':
        $out['value'] = php_worker_shared_increment($key, (int) ($_GET['by'] ?? 1));
        break;
    case 'touch':
        $out['ok'] = php_worker_shared_touch($key, (int) ($_GET['ttl'] ?? 0));
        break;
    case 'forget':
        $out['ok'] = php_worker_shared_forget($key);
        break;
    case 'count':
        $out['value'] = php_worker_shared_count();
        break;
    case 'flush':
        $out['ok'] = php_worker_shared_flush();
        break;
    default:
        $out['value'] = php_worker_shared_get($key, 'missing');
}
echo json_encode($out);
