<?php
// Reads the request body (an upload) to its end; answers its length.
$in = fopen('php://input', 'rb');
$n = 0;
while (!feof($in) && ($chunk = fread($in, 1 << 16)) !== false) {
    $n += strlen($chunk);
}
echo $n;
