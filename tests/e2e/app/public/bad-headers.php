<?php
// Header names PHP accepts but HTTP does not.
header('Bad Name: x');
header('Bad' . chr(1) . 'Ctl: y');
header('X-Fine: kept');
echo 'body';
