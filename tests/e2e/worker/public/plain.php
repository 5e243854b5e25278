<?php
echo 'classic plain';
