<?php
// The counter worker again, under its own name, to be recycled by max_requests.
require __DIR__ . '/counter.php';
